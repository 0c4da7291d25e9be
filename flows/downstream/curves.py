"""`finetune.checkpoints` and `finetune.label_counts`, checked: the points of the lift-vs-compute
and label-efficiency curves (flows/stages/lift_curve.py, label_curve.py evaluate them)."""

from __future__ import annotations

from typing import Literal

from flows.core.settings import ConfigError

LabelCount = int | Literal["all"]


def label_counts(values: list[LabelCount]) -> list[int | None]:
    """`finetune.label_counts`, checked and in order: training labels per seed at each point of
    the label-efficiency curve; None (`all`) is the whole train pool, last."""
    for value in values:
        if value != "all" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(
                f"finetune.label_counts={values}: {value!r} is not a number of labelled examples "
                "(a positive integer, or all); e.g. finetune.label_counts=[32,100,300,1000]"
            )
    if len(set(values)) != len(values):
        raise ConfigError(f"finetune.label_counts={values} names a count twice")
    counts = sorted(value for value in values if isinstance(value, int))
    return [*counts, None] if "all" in values else list(counts)


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
