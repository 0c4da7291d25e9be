"""`finetune.*`: which tasks to evaluate and the one recipe both arms of every task use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from flows.core.settings import ConfigError, Number, Settings, bounds
from flows.downstream.spec import TaskSpec, default_data_dir, task_specs

PositiveRate = Annotated[Number, bounds(gt=0)]


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
        self.specs()  # an unknown task or a bad catalog entry fails before any stage runs
        return self

    def specs(self) -> list[TaskSpec]:
        return task_specs(self.catalog, self.tasks)

    def resolved_data_dir(self) -> Path:
        return Path(self.data_dir).expanduser() if self.data_dir else default_data_dir()
