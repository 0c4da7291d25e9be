"""One task's downstream figures, read through attributes from the flat `<task>.*` outputs.

The finetune stage's manifest keeps flat keys (`sst2.lift_accuracy`, `sst2.pretrained_f1_mean`):
MLflow logs them as they are and stores on disk keep loading. Code that reads them goes through
`TaskFigures`, so a renamed or missing figure fails here with one message naming the task and key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flows.downstream.tasks.spec import ARMS, BASE_ARM

# A finetune artifact of `cloze evaluate` names the checkpoint it evaluated as it is under this
# key: its `pretrained` arm is that checkpoint's `base` (flows/stages/checkpoint_evaluation.py).
EVALUATED = "evaluated_checkpoint"


@dataclass(frozen=True)
class ArmFigures:
    """One arm at the task's configured metric, over seeds."""

    mean: float
    std: float
    learning_rate: float  # chosen on validation
    epochs_mean: float
    capped_runs: int  # runs whose best epoch was the last allowed
    # "lowest" / "highest" when the chosen rate is an end of the grid, "tied" when every rate
    # scored the same on validation, else ""
    grid_edge: str


@dataclass(frozen=True)
class TaskFigures:
    """A task's headline: both arms, the lift with its two intervals, the baselines."""

    task: str
    metric: str
    seeds: int
    max_epochs: int
    arms: dict[str, ArmFigures]  # "pretrained", "random_init"
    lift: float
    ci: tuple[float | None, float | None]  # paired t over seeds; None with one seed
    bootstrap: tuple[float, float]  # paired bootstrap over test examples
    baselines: dict[str, float]  # mean test score of each baseline (none for checkpoints)
    train_examples: int | None  # absent from a checkpoint evaluation's outputs
    recipe: str  # the task's effective recipe, as the summary prints it
    recipe_set_by_task: list[str]  # the fields its catalog entry sets over `finetune.*`
    caps: str  # the caps that bit (examples left out, truncation), "" when none did
    metrics: dict[str, Any]  # every `<task>.*` output, unprefixed: the task run's MLflow metrics
    evaluated: bool = False  # `cloze evaluate`'s: the pretrained arm is the checkpoint as it is
    base: ArmFigures | None = None  # a continuation's: the checkpoint it continued, as it was

    @classmethod
    def read(cls, outputs: Mapping[str, Any], task: str) -> TaskFigures:
        prefix = f"{task}."
        own = {key.removeprefix(prefix): v for key, v in outputs.items() if key.startswith(prefix)}

        def value(key: str) -> Any:
            if key not in own:
                raise ValueError(
                    f"finetune outputs lack {prefix}{key} (have {sorted(own)}); the artifact was "
                    "written by another version of the stage"
                )
            return own[key]

        metric = value("metric")
        lift = f"lift_{metric}"

        def arm_figures(arm: str) -> ArmFigures:
            return ArmFigures(
                mean=value(f"{arm}_{metric}_mean"),
                std=value(f"{arm}_{metric}_std"),
                learning_rate=value(f"{arm}_learning_rate"),
                epochs_mean=value(f"{arm}_epochs_mean"),
                capped_runs=value(f"{arm}_capped_runs"),
                grid_edge=own.get(f"{arm}_grid_edge", ""),
            )

        return cls(
            task=task,
            metric=metric,
            seeds=value("seeds"),
            max_epochs=value("max_epochs"),
            arms={arm: arm_figures(arm) for arm in ARMS},
            lift=value(lift),
            ci=(own.get(f"{lift}_ci_low"), own.get(f"{lift}_ci_high")),
            bootstrap=(value(f"{lift}_bootstrap_low"), value(f"{lift}_bootstrap_high")),
            baselines={
                name: value(f"baseline_{name}_{metric}_mean")
                for name in filter(None, own.get("baselines", "").split(","))
            },
            train_examples=own.get("train_examples"),
            recipe=own.get("recipe", ""),
            recipe_set_by_task=list(filter(None, own.get("recipe_set_by_task", "").split(","))),
            caps=own.get("caps", ""),
            metrics=own,
            evaluated=EVALUATED in outputs,
            base=arm_figures(BASE_ARM) if f"{BASE_ARM}_{metric}_mean" in own else None,
        )

    @property
    def tuned_arms(self) -> dict[str, ArmFigures]:
        """Every arm tuned on a grid within an epoch limit: both arms, and a continuation's base
        (whose grid edge and cap the flags must name too)."""
        return self.arms if self.base is None else {**self.arms, BASE_ARM: self.base}

    @property
    def from_checkpoint(self) -> bool:
        """Whether the pretrained arm's weights came from a public checkpoint (a continuation,
        with a base arm beside it, or `cloze evaluate`'s checkpoint as it is): it was then tuned
        on `finetune.pretrained_learning_rates` for `finetune.pretrained_epochs` at most
        (TaskRecipe.grid)."""
        return self.evaluated or f"base_{self.metric}_mean" in self.metrics

    @property
    def pretrained(self) -> ArmFigures:
        return self.arms["pretrained"]

    @property
    def random_init(self) -> ArmFigures:
        return self.arms["random_init"]
