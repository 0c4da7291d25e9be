"""The gated feed-forward block: autograd's function, with less kept for backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lightning_modules.models.feed_forward import GatedFeedForward
from tests.fakes import gradient_pairs


def reference(block: GatedFeedForward, hidden: torch.Tensor) -> torch.Tensor:
    value, gates = block.up(hidden).chunk(2, dim=-1)
    activated = F.gelu(value, approximate=block.approximate)
    return F.linear(activated * gates, block.down.weight, block.down.bias)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("bias", [False, True])
def test_outputs_and_gradients_equal_autograds_bit_for_bit(bias: bool, approximate: str) -> None:
    torch.manual_seed(0)
    block = GatedFeedForward(16, 24, bias, approximate)
    hidden = torch.randn(3, 5, 16, requires_grad=True)
    ours, theirs = block(hidden), reference(block, hidden)
    assert torch.equal(ours, theirs)
    for mine, expected in gradient_pairs(ours, theirs, [hidden, *block.parameters()]):
        assert torch.equal(mine, expected)


def test_backward_keeps_the_up_projection_and_its_input_only() -> None:
    torch.manual_seed(0)
    block = GatedFeedForward(16, 24, bias=False)
    hidden = torch.randn(3, 5, 16, requires_grad=True)
    parameters = {parameter.data_ptr() for parameter in block.parameters()}
    kept: list[int] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.data_ptr() not in parameters:
            kept.append(tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        block(hidden)
    # The input (for the up-projection's weight gradient) and the up-projection: no activation
    # and no gated product.
    assert sorted(kept) == [15 * 16, 15 * 48]


@pytest.mark.parametrize("bias", [False, True])
def test_under_bf16_autocast_gradients_match_autograds_in_their_parameters_dtypes(
    bias: bool,
) -> None:
    # bf16-mixed training: the recomputation runs in the dtypes the forward used.
    torch.manual_seed(0)
    block = GatedFeedForward(16, 24, bias)
    hidden = torch.randn(3, 5, 16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, theirs = block(hidden), reference(block, hidden)
    assert ours.dtype == torch.bfloat16 and torch.equal(ours, theirs)
    for mine, expected in gradient_pairs(ours, theirs, [hidden, *block.parameters()]):
        assert mine.dtype == expected.dtype == torch.float32
        torch.testing.assert_close(mine, expected, atol=1e-2, rtol=1e-2)
