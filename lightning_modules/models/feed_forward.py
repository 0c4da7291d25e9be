"""The gated feed-forward block (GeGLU, Shazeer 2020) of ModernBERT-class encoders."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class GatedFeedForward(nn.Module):
    """`down(gelu(a) * b)` with `a, b` the two halves of one up-projection.

    `intermediate_size` is the width of each half (ModernBERT's and `transformers`' convention), so
    the up-projection is twice as wide as BERT's at the same setting.
    """

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool) -> None:
        super().__init__()
        self.up = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.down = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        value, gate = self.up(hidden).chunk(2, dim=-1)
        return self.down(F.gelu(value) * gate)
