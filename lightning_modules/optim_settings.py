"""AdamW's settings and its learning-rate schedule, as plain data (optim.py builds them).

No torch here: `trainer.*` is validated with these before torch is imported.
"""

from __future__ import annotations

from typing import Annotated, Literal

from annotated_types import Ge, Gt, Lt
from pydantic.dataclasses import dataclass

Schedule = Literal["linear", "cosine", "constant"]


@dataclass(frozen=True)
class OptimizerSettings:
    """AdamW and its schedule, validated by pydantic on construction.

    The `trainer.*` config keys of the same names feed these fields (flows/training/settings.py
    declares them with the run's defaults; a test proves their types and ranges agree). Defaults
    here are what code that builds an optimizer directly gets (fine-tuning, tests).
    """

    learning_rate: Annotated[float, Gt(0)] = 5e-4
    weight_decay: Annotated[float, Ge(0)] = 0.01
    warmup_steps: Annotated[int, Ge(0)] = 0
    total_steps: Annotated[int, Ge(1)] = 1
    schedule: Schedule = "linear"
    beta1: Annotated[float, Ge(0), Lt(1)] = 0.9
    beta2: Annotated[float, Ge(0), Lt(1)] = 0.98
    eps: Annotated[float, Gt(0)] = 1e-6
    # A checkpoint without an MLM head: its fresh head trains alone for this many first steps,
    # at `head_learning_rate`, before the warmup and decay over the rest (flows/continuation.py).
    head_only_steps: Annotated[int, Ge(0)] = 0
    head_learning_rate: Annotated[float, Gt(0)] = 1e-3
