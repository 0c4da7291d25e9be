"""`finetune.*`: which tasks to evaluate and the one recipe both arms of every task use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from flows.core.settings import ConfigError, Number, Settings, bounds
from flows.downstream.load import Sampling, check_tasks
from flows.downstream.spec import BASELINES, TaskSpec, default_data_dir, task_specs

PositiveRate = Annotated[Number, bounds(gt=0)]


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


class FinetuneSettings(Settings):
    """The recipe. `learning_rates` is a grid searched per arm on the validation split; the
    epoch is chosen per run on validation too (best epoch kept, `patience` epochs to stop)."""

    section = "finetune"
    tasks: list[str] = Field(default_factory=lambda: ["pydoc_topics"])
    catalog: dict[str, Any] = Field(default_factory=dict)
    data_dir: str | None = None
    seeds: Annotated[int, bounds(ge=1)] = 3
    learning_rates: list[PositiveRate] = Field(default_factory=lambda: [1e-4, 3e-4, 1e-3])
    max_length: Annotated[int, bounds(ge=8)] = 128
    epochs: Annotated[int, bounds(ge=1)] = 5
    patience: Annotated[int, bounds(ge=1)] = 2
    batch_size: Annotated[int, bounds(ge=1)] = 32
    weight_decay: Annotated[Number, bounds(ge=0)] = 0.01
    warmup_ratio: Annotated[Number, bounds(ge=0, lt=1)] = 0.1
    classifier_dropout: Annotated[Number, bounds(ge=0, lt=1)] = 0.1
    train_examples: Annotated[int, bounds(ge=1)] | None = None
    validation_examples: Annotated[int, bounds(ge=1)] | None = 1000
    test_examples: Annotated[int, bounds(ge=1)] | None = None
    confidence: Annotated[Number, bounds(ge=0.5, lt=1)] = 0.95
    baselines: list[str] | None = None  # None: every baseline of each task's kind
    # Fractions of pretraining whose weights are evaluated too: a lift-vs-compute curve.
    checkpoints: list[Number] = Field(default_factory=lambda: [1.0])
    # Test-set resamples behind the bootstrap interval of the lift; fewer cannot place its tails.
    bootstrap_samples: Annotated[int, bounds(ge=100)] = 1000
    log_every_steps: Annotated[int, bounds(ge=1)] = 20

    @model_validator(mode="after")
    def _tasks_are_known(self) -> FinetuneSettings:
        if not self.tasks:
            raise ConfigError("finetune.tasks is empty; name at least one task (e.g. [sst2])")
        if len(set(self.tasks)) != len(self.tasks):
            raise ConfigError(f"finetune.tasks={self.tasks} names a task twice")
        if not self.learning_rates:
            raise ConfigError(
                "finetune.learning_rates=[] must be a non-empty list of positive numbers (the "
                "grid each arm picks from on validation)"
            )
        checkpoint_fractions(self.checkpoints)
        for spec in self.specs():  # an unknown task or a bad entry fails before any stage runs
            self.baselines_for(spec)
        return self

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

    def sampling(self, seed: int) -> Sampling:
        return Sampling(self.validation_examples, self.test_examples, seed)

    def check_task_files(self, seed: int) -> None:
        """Reads every task's files now (flows/downstream/load.py `check_tasks`)."""
        check_tasks(self.specs(), self.resolved_data_dir(), self.sampling(seed))

    def resolved_data_dir(self) -> Path:
        return Path(self.data_dir).expanduser() if self.data_dir else default_data_dir()
