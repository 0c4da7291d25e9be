"""The fused vocabulary cross-entropy is F.cross_entropy in fp32, with the gradient in the logits'
dtype, whatever the number of rows relative to the chunk size."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lightning_modules.models.vocab_loss import ROWS_PER_CHUNK, vocab_cross_entropy


@pytest.mark.parametrize("rows", [1, ROWS_PER_CHUNK, 2 * ROWS_PER_CHUNK + 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loss_and_gradient_equal_fp32_cross_entropy(rows: int, dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(rows)
    logits = (torch.randn(rows, 301, generator=generator) * 4).to(dtype).requires_grad_()
    targets = torch.randint(0, 301, (rows,), generator=generator)
    reference_logits = logits.detach().float().requires_grad_()

    loss = vocab_cross_entropy(logits, targets)
    (loss * 3).backward()
    expected = F.cross_entropy(reference_logits, targets)
    (expected * 3).backward()

    assert loss.dtype == torch.float32
    assert torch.allclose(loss, expected, atol=1e-5)
    assert logits.grad is not None and logits.grad.dtype == dtype
    # bf16 keeps 8 significant bits, and the gradient is rounded twice (softmax, then the scale).
    relative = 1e-5 if dtype == torch.float32 else 2**-7
    tolerance = relative * float(reference_logits.grad.abs().max())
    assert torch.allclose(logits.grad.float(), reference_logits.grad, rtol=0, atol=tolerance)


def test_without_gradients_no_gradient_buffer_is_kept() -> None:
    logits = torch.randn(4, 11)
    with torch.no_grad():
        loss = vocab_cross_entropy(logits, torch.tensor([0, 3, 10, 5]))
    assert torch.allclose(loss, F.cross_entropy(logits, torch.tensor([0, 3, 10, 5])))


def test_a_second_backward_pass_is_refused_not_scaled_twice() -> None:
    logits = torch.randn(3, 11, requires_grad=True)
    loss = vocab_cross_entropy(logits, torch.tensor([0, 1, 2]))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="one backward pass"):
        loss.backward()


def test_no_rows_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one row"):
        vocab_cross_entropy(torch.zeros(0, 11), torch.zeros(0, dtype=torch.long))


def test_the_training_accuracy_is_argmax_accuracy_without_the_argmax() -> None:
    """`top_scored` replaces the slow bf16 argmax; without ties it is the same test."""
    from lightning_modules.mlm import top_scored

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 500, generator=generator)
    targets = torch.randint(0, 500, (64,), generator=generator)
    targets[:16] = logits[:16].argmax(-1)  # some right, most wrong
    assert torch.equal(top_scored(logits, targets), logits.argmax(-1) == targets)
