"""`finetune.*`: which tasks to evaluate and the one recipe both arms of every task use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows.downstream.spec import BASELINES, TaskSpec, default_data_dir, task_specs
from flows.settings import ConfigError, settings_from


def checkpoint_fractions(values: list[float]) -> tuple[float, ...]:
    """`finetune.checkpoints`, checked and sorted: the fractions of the pretraining budget whose
    encoder weights the lift-vs-compute curve evaluates (pretraining keeps them)."""
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            raise ConfigError(
                f"finetune.checkpoints={values}: {value!r} is not a fraction of the pretraining "
                "budget in (0, 1]; e.g. finetune.checkpoints=[0.25,0.5,1.0]"
            )
    if not values:
        raise ConfigError("finetune.checkpoints is empty; [1.0] evaluates the final weights only")
    return tuple(sorted({float(value) for value in values}))


@dataclass(frozen=True)
class FinetuneSettings:
    """The recipe. `learning_rates` is a grid searched per arm on the validation split; the
    epoch is chosen per run on validation too (best epoch kept, `patience` epochs to stop)."""

    tasks: list[str] = field(default_factory=lambda: ["pydoc_topics"])
    catalog: dict[str, Any] = field(default_factory=dict)
    data_dir: str | None = None
    seeds: int = 3
    learning_rates: list[float] = field(default_factory=lambda: [1e-4, 3e-4, 1e-3])
    max_length: int = 128
    epochs: int = 5
    patience: int = 2
    batch_size: int = 32
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    classifier_dropout: float = 0.1
    train_examples: int | None = None
    validation_examples: int | None = 1000
    test_examples: int | None = None
    confidence: float = 0.95
    baselines: list[str] | None = None  # None: every baseline of each task's kind
    # Fractions of pretraining whose weights are evaluated too: a lift-vs-compute curve.
    checkpoints: list[float] = field(default_factory=lambda: [1.0])
    bootstrap_samples: int = 1000  # test-set resamples behind the bootstrap interval of the lift
    log_every_steps: int = 20

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ConfigError("finetune.tasks is empty; name at least one task (e.g. [sst2])")
        if len(set(self.tasks)) != len(self.tasks):
            raise ConfigError(f"finetune.tasks={self.tasks} names a task twice")
        for key in ("seeds", "epochs", "patience", "batch_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"finetune.{key}={getattr(self, key)} must be at least 1")
        if self.max_length < 8:
            raise ConfigError(f"finetune.max_length={self.max_length} must be at least 8")
        if not self.learning_rates or any(
            not isinstance(rate, int | float) or rate <= 0 for rate in self.learning_rates
        ):
            raise ConfigError(
                f"finetune.learning_rates={self.learning_rates} must be a non-empty list of "
                "positive numbers (the grid each arm picks from on validation)"
            )
        for key in ("train_examples", "validation_examples", "test_examples"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"finetune.{key}={value} must be positive, or null for all")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"finetune.warmup_ratio={self.warmup_ratio} must be in [0, 1)")
        checkpoint_fractions(self.checkpoints)
        if self.bootstrap_samples < 100:
            raise ConfigError(
                f"finetune.bootstrap_samples={self.bootstrap_samples} must be at least 100 "
                "(fewer resamples cannot place the interval's tails)"
            )
        if not 0.5 <= self.confidence < 1.0:
            raise ConfigError(f"finetune.confidence={self.confidence} must be in [0.5, 1)")
        for spec in self.specs():  # an unknown task or a bad entry fails before any stage runs
            self.baselines_for(spec)

    def baselines_for(self, spec: TaskSpec) -> tuple[str, ...]:
        """The baselines a task gets; one its kind cannot have is a config error."""
        possible = BASELINES[spec.kind]
        if self.baselines is None:
            return possible
        for name in self.baselines:
            if name not in possible:
                raise ConfigError(
                    f"finetune.baselines: {name!r} cannot be computed for task {spec.name}, a "
                    f"{spec.kind} task; a {spec.kind} task has {', '.join(possible)}"
                )
        return tuple(self.baselines)

    def specs(self) -> list[TaskSpec]:
        return task_specs(self.catalog, self.tasks)

    @property
    def curve_fractions(self) -> tuple[float, ...]:
        """The curve's points below the final weights; empty: no curve asked for."""
        return tuple(value for value in checkpoint_fractions(self.checkpoints) if value < 1.0)

    def resolved_data_dir(self) -> Path:
        return Path(self.data_dir).expanduser() if self.data_dir else default_data_dir()

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> FinetuneSettings:
        return settings_from(cls, config["finetune"], "finetune")
