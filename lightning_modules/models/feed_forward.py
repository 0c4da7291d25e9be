"""The gated feed-forward block (GeGLU, Shazeer 2020) of ModernBERT-class encoders.

Autograd would keep three tensors of this block for backward: the up-projection, `gelu` of its
first half and the gated product (the down-projection's input), 24 of a modernbert-mini layer's
79 MiB at 4,096 tokens. Here the gate and the down-projection are one autograd function that
keeps only the up-projection and recomputes `gelu(a) * b` in backward: two element-wise passes
over half of it, against a matmul on each side.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class GatedFeedForward(nn.Module):
    """`down(gelu(a) * b)` with `a, b` the two halves of one up-projection (gelu exact, or its
    tanh approximation).

    `intermediate_size` is the width of each half (ModernBERT's and `transformers`' convention), so
    the up-projection is twice as wide as BERT's at the same setting.
    """

    def __init__(
        self, hidden_size: int, intermediate_size: int, bias: bool, approximate: str = "none"
    ) -> None:
        super().__init__()
        self.up = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.down = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.approximate = approximate  # F.gelu's: "none" (erf) or "tanh"

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return _GatedDown.apply(self.up(hidden), self.down.weight, self.down.bias, self.approximate)


def gate(
    projected: torch.Tensor, approximate: str = "none"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(a, gelu(a), gelu(a) * b)` for the two halves `a, b` of `projected`."""
    value, gates = projected.chunk(2, dim=-1)
    activated = F.gelu(value, approximate=approximate)
    return value, activated, activated * gates


class _GatedDown(torch.autograd.Function):
    """`F.linear(gelu(a) * b, weight, bias)`, keeping only `[a, b]` for backward.

    Under autocast (bf16-mixed training) backward recomputes under the forward's autocast state,
    so the product and the matmuls are in the dtypes the forward used; each gradient is returned
    in its input's dtype, as autograd's casts return them.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        projected: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        approximate: str,
    ) -> torch.Tensor:
        device = projected.device.type
        ctx.autocast = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        ctx.save_for_backward(projected, weight)
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.approximate = approximate
        return F.linear(gate(projected, approximate)[2], weight, bias)

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, gradient: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, None]:
        projected, weight = ctx.saved_tensors
        enabled, dtype = ctx.autocast
        with torch.autocast(projected.device.type, dtype=dtype, enabled=enabled):
            value, activated, product = gate(projected, ctx.approximate)
            rows = gradient.reshape(-1, gradient.shape[-1])
            grad_product = (rows @ weight).view(product.shape).to(product.dtype)
            grad_weight = rows.t() @ product.reshape(-1, product.shape[-1])
            grad_bias = rows.sum(0).to(ctx.bias_dtype) if ctx.needs_input_grad[2] else None
            gates = projected.chunk(2, dim=-1)[1]
            # Both halves written in place into one buffer: no concatenation.
            grad_projected = torch.empty_like(projected)
            grad_value, grad_gates = grad_projected.chunk(2, dim=-1)
            torch.ops.aten.gelu_backward.grad_input(
                grad_product * gates, value, approximate=ctx.approximate, grad_input=grad_value
            )
            torch.mul(grad_product, activated, out=grad_gates)
        return grad_projected, grad_weight.to(weight.dtype), grad_bias, None
