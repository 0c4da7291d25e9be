"""Champion/challenger: the promotion decision on `refresh.*` (flows/plan.py `RefreshSettings`),
free of any I/O.

The metric is any numeric output key of the finetune stage (`<task>.pretrained_<metric>_mean`,
`<task>.lift_<metric>`, ...), read by name, so the decision does not depend on which keys the
finetune stage happens to produce.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flows.core.settings import ConfigError


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str
    challenger_score: float
    champion_score: float | None


def metric_value(outputs: Mapping[str, Any], metric: str) -> float:
    """`refresh.metric` from a finetune artifact's outputs; the error lists what is there."""
    value = outputs.get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float):
        numeric = sorted(
            key
            for key, item in outputs.items()
            if isinstance(item, int | float) and not isinstance(item, bool)
        )
        raise ConfigError(
            f"refresh.metric={metric!r} is not a numeric finetune output; choose one of: "
            f"{', '.join(numeric)}"
        )
    return float(value)


@dataclass(frozen=True)
class Forgetting:
    """The general validation loss (`pretrain.general_validation`) of the model a challenger
    continued from (its step 0: the champion, or on a first run the base model) and of the
    challenger, measured in one run on the same rows and masks; and the rise allowed."""

    before: float
    after: float
    max_increase: float | None
    # The increase's paired bootstrap interval over the general rows (None: an artifact that
    # kept no rows); the judgement reads the increase itself, the report shows both.
    interval: tuple[float, float] | None = None

    @property
    def increase(self) -> float:
        return self.after - self.before

    @property
    def increase_text(self) -> str:
        """`+0.0500 [+0.0310, +0.0690]`: the rise, with its interval when known."""
        if self.interval is None:
            return f"{self.increase:+.4f}"
        return f"{self.increase:+.4f} [{self.interval[0]:+.4f}, {self.interval[1]:+.4f}]"

    @property
    def too_much(self) -> bool:
        return self.max_increase is not None and self.increase > self.max_increase


def decide(
    challenger: float,
    champion: float | None,
    margin: float,
    higher_is_better: bool = True,
    worse_than_base: tuple[str, ...] = (),
    forgetting: Forgetting | None = None,
) -> Decision:
    """Promote when there is no champion yet, or when the challenger wins by more than `margin`;
    never a challenger that continuing made worse than its base checkpoint (`worse_than_base`:
    the tasks where an interval of adapted over base lies below zero), nor one that forgot more
    general text than `refresh.max_general_loss_increase` allows (`forgetting`).

    A tie or a win inside the margin keeps the champion: a model that serves users is replaced
    only for a difference larger than the evaluation's noise, which the margin stands for.
    """
    if worse_than_base:
        return Decision(
            False,
            f"continuing made it worse than its base checkpoint on {', '.join(worse_than_base)}",
            challenger,
            champion,
        )
    if forgetting is not None and forgetting.too_much:
        return Decision(
            False,
            f"it forgot general text: its general validation loss rose by "
            f"{forgetting.increase_text} ({forgetting.before:.4f} -> {forgetting.after:.4f}) over "
            f"the model it continued, more than refresh.max_general_loss_increase="
            f"{forgetting.max_increase}",
            challenger,
            champion,
        )
    if champion is None:
        return Decision(True, "no champion yet", challenger, None)
    gain = challenger - champion if higher_is_better else champion - challenger
    if gain > margin:
        return Decision(True, f"beats the champion by {gain:+.4f} > {margin}", challenger, champion)
    return Decision(
        False, f"gain {gain:+.4f} is not above the margin {margin}", challenger, champion
    )
