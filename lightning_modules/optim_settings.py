"""AdamW's settings and its learning-rate schedule, as plain data (optim.py builds them).

No torch here: `trainer.*` is validated with these before torch is imported.
"""

from __future__ import annotations

from typing import Annotated, Literal

from annotated_types import Ge, Gt, Lt
from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

Schedule = Literal["linear", "cosine", "constant"]


@dataclass(frozen=True, config=ConfigDict(use_attribute_docstrings=True))
class OptimizerSettings:
    """AdamW and its schedule, validated by pydantic on construction.

    The one home of these fields' defaults and descriptions: `trainer.*` holds the pretraining
    recipe's keys (flows/training/settings.py derives them from here) and `finetune.*` AdamW's
    beta2 and eps. The defaults are the small-budget pretraining recipe's (Cramming).
    """

    learning_rate: Annotated[float, Gt(0)] = 2e-3
    """Peak AdamW learning rate, reached after the warmup (the small-budget recipe's)."""
    weight_decay: Annotated[float, Ge(0)] = 0.01
    """AdamW's decoupled weight decay (never on biases and norms)."""
    warmup_steps: Annotated[int, Ge(0)] = 200
    """Steps of linear warmup from 0 to `learning_rate` (10% of the default steps)."""
    total_steps: Annotated[int, Ge(1)] = 1
    """Optimizer steps in all: the schedule decays over those after the warmup."""
    schedule: Schedule = "linear"
    """After the warmup: linear | cosine (decay to 0) | constant."""
    beta1: Annotated[float, Ge(0), Lt(1)] = 0.9
    """AdamW's first-moment decay."""
    beta2: Annotated[float, Ge(0), Lt(1)] = 0.98
    """AdamW's second-moment decay."""
    eps: Annotated[float, Gt(0)] = 1e-6
    """AdamW's epsilon, added to the second moment's root."""
    head_only_steps: Annotated[int, Ge(0)] = 0
    """A checkpoint without an MLM head: its fresh head trains alone for this many first steps,
    at `head_learning_rate`, before the warmup and decay over the rest
    (flows/stages/init_point.py)."""
    head_learning_rate: Annotated[float, Gt(0)] = 1e-3
    """The new head's rate while it trains alone."""
