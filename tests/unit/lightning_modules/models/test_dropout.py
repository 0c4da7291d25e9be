"""The CPU dropout (lightning_modules/models/dropout.py) is dropout: the rate, the expectation, the
gradient and the seed's reproducibility; attention with it is SDPA's math path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lightning_modules.models.dropout import Dropout, dropout
from lightning_modules.models.encoder import attention_with_dropout


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_drops_at_rate_p_and_keeps_the_expectation(dtype: torch.dtype, p: float) -> None:
    torch.manual_seed(0)
    out = dropout(torch.ones(1_000_000, dtype=dtype), p, training=True)
    # 1e6 draws: the dropped share's standard error is under 5e-4.
    assert abs(float((out == 0).float().mean()) - p) < 3e-3
    assert abs(float(out.float().mean()) - 1.0) < 5e-3


def test_gradient_is_the_mask_times_the_scale() -> None:
    torch.manual_seed(0)
    hidden = torch.randn(64, 64, requires_grad=True)
    out = dropout(hidden, 0.25, training=True)
    out.sum().backward()
    assert hidden.grad is not None
    kept = out != 0
    assert torch.equal(hidden.grad != 0, kept)
    assert torch.allclose(hidden.grad[kept], torch.tensor(65536 / 49152))


def test_the_seed_fixes_the_mask_and_eval_is_the_identity() -> None:
    hidden = torch.randn(8, 128)
    torch.manual_seed(3)
    first = dropout(hidden, 0.1, training=True)
    torch.manual_seed(3)
    assert torch.equal(first, dropout(hidden, 0.1, training=True))
    layer = Dropout(0.1).eval()
    assert layer(hidden) is hidden and layer.p == 0.1


def test_attention_with_dropout_is_sdpa_when_nothing_is_dropped() -> None:
    """p below 1/65,536 keeps every weight, so the rest of the path must be SDPA's math, zeros
    for a query with no key to attend to included."""
    generator = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(2, 4, 16, 8, generator=generator) for _ in range(3))
    mask = torch.rand(2, 1, 16, 16, generator=generator) < 0.7
    mask[0, 0, 3] = False  # a query whose keys are all masked, as padding under document attention
    expected = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    assert torch.allclose(
        attention_with_dropout(query, key, value, mask, 1e-9), expected, atol=1e-6
    )
