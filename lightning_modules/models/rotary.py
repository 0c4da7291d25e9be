"""Rotary position embeddings (RoPE, Su et al. 2021), as ModernBERT uses them.

Queries and keys are rotated by an angle proportional to their position, so their dot product
depends on positions only through their difference: no position table, and no hard length limit
beyond the one the model was trained at. Global and sliding-window layers get their own base
(`model.rope_theta`, `model.local_rope_theta`), as in ModernBERT.
"""

from __future__ import annotations

import torch
from torch import nn

RotaryTables = tuple[torch.Tensor, torch.Tensor]


class RotaryEmbedding(nn.Module):
    """cos/sin tables for one base; the frequencies are a buffer, never saved in checkpoints."""

    inverse_frequencies: torch.Tensor

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary position embeddings need an even head size, got {head_dim}")
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim
        self.register_buffer("inverse_frequencies", 1.0 / theta**exponents, persistent=False)

    def forward(self, positions: torch.Tensor) -> RotaryTables:
        """cos and sin, `(seq_len, head_dim)`, for the integer `positions` given."""
        angles = positions.float()[:, None] * self.inverse_frequencies.to(positions.device)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rotary(x: torch.Tensor, tables: RotaryTables) -> torch.Tensor:
    """Rotates `(batch, heads, seq_len, head_dim)` in fp32 (bf16 angles lose position detail)."""
    cos, sin = tables
    rotated = x.float() * cos + rotate_half(x.float()) * sin
    return rotated.to(x.dtype)
