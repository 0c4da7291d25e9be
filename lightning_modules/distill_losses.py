"""The distillation losses' weights, as plain data (distill.py computes them).

No torch here: `distill.*` is validated with these before torch is imported, and they are the one
home of those keys' defaults and descriptions (flows/stages/distill_plan.py derives them).
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import Ge, Gt
from pydantic import ConfigDict
from pydantic.dataclasses import dataclass


@dataclass(frozen=True, config=ConfigDict(use_attribute_docstrings=True))
class DistillLosses:
    """Weights of the loss terms (a zero weight skips its computation), the softmax
    temperature, and the teacher's precision."""

    kl_weight: Annotated[float, Ge(0)] = 1.0
    """KL to the teacher at masked positions, temperature-scaled (0 skips it)."""
    mlm_weight: Annotated[float, Ge(0)] = 1.0
    """The student's own MLM loss."""
    cosine_weight: Annotated[float, Ge(0)] = 1.0
    """Cosine of the last hidden states (DistilBERT)."""
    hidden_mse_weight: Annotated[float, Ge(0)] = 0.0
    """TinyBERT's hidden-state MSE, per `layer_map`."""
    attention_mse_weight: Annotated[float, Ge(0)] = 0.0
    """TinyBERT's attention MSE, per `layer_map`."""
    temperature: Annotated[float, Gt(0)] = 2.0
    """Softmax temperature of the KL term."""
    teacher_bf16: bool = True
    """The teacher's forward under bf16 autocast, in a bf16-mixed run (it only makes targets)."""
