"""Blocked sliding-window attention: the same function as dense attention under the banded mask,
with cost per query that does not grow with the row."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.models.local_attention import local_attention, local_window, neighbourhoods
from lightning_modules.models.taps import tapped

# fp32: masked keys weigh exactly zero in both; only the order of the sums differs.
FP32_CLOSE = {"atol": 2e-6, "rtol": 1e-5}


def band(seq_len: int, window: int) -> torch.Tensor:
    """The dense specification: keys within window // 2 positions either side."""
    positions = torch.arange(seq_len)
    return (positions[:, None] - positions[None, :]).abs() <= window // 2


def inputs(seq_len: int, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    query, key, value = (torch.randn(2, 3, seq_len, 8, generator=generator) for _ in range(3))
    real = torch.ones(2, seq_len, dtype=torch.long)
    real[1, seq_len * 2 // 3 :] = 0  # row 1: a padded tail
    documents = torch.randint(0, 4, (2, seq_len), generator=generator).sort(-1).values
    return {"query": query, "key": key, "value": value, "real": real, "documents": documents}


def dense_mask(
    seq_len: int, window: int, real: torch.Tensor, documents: torch.Tensor
) -> torch.Tensor:
    same_document = documents[:, None, :, None] == documents[:, None, None, :]
    return band(seq_len, window) & real.bool()[:, None, None, :] & same_document


@pytest.mark.parametrize("seq_len", [1, 7, 16, 63, 64, 65, 300])
@pytest.mark.parametrize("window", [1, 4, 9, 128])
def test_blocked_attention_equals_dense_attention_under_the_band_padding_and_documents(
    seq_len: int, window: int
) -> None:
    x = inputs(seq_len)
    plan = local_window(seq_len, window, torch.device("cpu"), x["real"], x["documents"])
    expected_mask = dense_mask(seq_len, window, x["real"], x["documents"])
    assert torch.equal(plan.dense(), expected_mask)
    blocked = local_attention(x["query"], x["key"], x["value"], plan)
    dense = F.scaled_dot_product_attention(
        x["query"], x["key"], x["value"], attn_mask=expected_mask
    )
    torch.testing.assert_close(blocked, dense, **FP32_CLOSE)


def test_gradients_equal_dense_attention_and_pads_far_from_any_token_get_zeros() -> None:
    x = inputs(300)
    x["real"][1, 100:] = 0  # pads 100-299: most see no real key within the window
    leaves = [x[name].requires_grad_() for name in ("query", "key", "value")]
    plan = local_window(300, 16, torch.device("cpu"), x["real"])
    blocked = local_attention(*leaves, plan)
    dense = F.scaled_dot_product_attention(
        *leaves, attn_mask=band(300, 16) & x["real"].bool()[:, None, None, :]
    )
    assert torch.equal(blocked[1, :, 200:], torch.zeros_like(blocked[1, :, 200:]))
    torch.testing.assert_close(blocked, dense, **FP32_CLOSE)
    for ours, theirs in zip(
        torch.autograd.grad(blocked.square().sum(), leaves),
        torch.autograd.grad(dense.square().sum(), leaves),
        strict=True,
    ):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_the_plan_grows_linearly_with_the_row_not_quadratically() -> None:
    sizes = [local_window(n, 128, torch.device("cpu")).allowed.numel() for n in (1024, 2048, 4096)]
    assert sizes[1] == 2 * sizes[0] and sizes[2] == 2 * sizes[1]
    assert sizes[0] == 1024 * 3 * 64  # 192 scores per query, not 1,024


def test_a_bf16_model_keeps_its_dtype_through_the_fp32_softmax() -> None:
    x = inputs(40)
    tensors = [x[name].bfloat16() for name in ("query", "key", "value")]
    blocked = local_attention(*tensors, local_window(40, 8, torch.device("cpu")))
    assert blocked.dtype == torch.bfloat16
    dense = F.scaled_dot_product_attention(*tensors, attn_mask=band(40, 8))
    torch.testing.assert_close(blocked.float(), dense.float(), atol=2e-2, rtol=2e-2)


def test_the_neighbourhood_gather_has_the_exact_gradient() -> None:
    keys = torch.randn(1, 2, 11, 3, dtype=torch.float64, requires_grad=True)
    plan = local_window(11, 4, torch.device("cpu"))
    assert torch.autograd.gradcheck(lambda tensor: neighbourhoods(tensor, plan), (keys,))


def test_attention_maps_of_a_local_layer_keep_to_the_band() -> None:
    # Distillation reads attention maps through taps: a local layer's plan becomes its dense mask.
    torch.manual_seed(0)
    config = EncoderConfig(
        vocab_size=60, hidden_size=32, num_heads=4, global_attention_every=2, local_attention=4
    )
    encoder = BertEncoder(config).eval()
    with torch.no_grad(), tapped(encoder, attention=True) as taps:
        encoder(torch.randint(5, 60, (2, 16)))
    local_map = taps.attention(1).detach()
    assert float(local_map[..., ~band(16, 4)].max()) == 0.0
    torch.testing.assert_close(local_map.sum(-1), torch.ones(2, 4, 16))


def saved_storages(function: Callable[[], torch.Tensor]) -> list[int]:
    """Bytes of each storage autograd keeps for backward while `function` runs."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        function()
    return sorted(storages.values())


def test_backward_keeps_one_copy_of_the_keys_and_values_not_three() -> None:
    x = inputs(256)
    leaves = [x[name].requires_grad_() for name in ("query", "key", "value")]
    plan = local_window(256, 32, torch.device("cpu"))
    mask = plan.kernel_mask(2, torch.float32)
    kept = saved_storages(lambda: local_attention(*leaves, plan))
    kept.remove(mask.nbytes)  # one additive mask, shared by every local layer of a forward
    # Queries, output, log-sum-exp, and the keys and values each padded by a block at both ends
    # of the batch; three-block copies would make it 8 key-sized tensors.
    one_copy = x["key"].nbytes + 2 * plan.block * 3 * 8 * 4
    assert max(kept) <= one_copy and sum(kept) <= 5 * x["key"].nbytes


def test_the_result_is_laid_out_for_merging_heads_without_a_copy() -> None:
    x = inputs(128)
    rows = [x[name].transpose(1, 2).contiguous().transpose(1, 2) for name in ("query", "key")]
    context = local_attention(*rows, x["value"], local_window(128, 16, torch.device("cpu")))
    merged = context.transpose(1, 2).view(2, 128, -1)  # a view: raises if a copy were needed
    assert merged.shape == (2, 128, 24)


def test_with_attention_dropout_each_query_still_reaches_only_its_band() -> None:
    # Dropout takes SDPA's path (the fused CPU kernel has none): the same blocks and masks.
    torch.manual_seed(0)
    x = inputs(96)
    key = x["key"].requires_grad_()
    plan = local_window(96, 8, torch.device("cpu"))
    context = local_attention(x["query"], key, x["value"], plan, dropout_p=0.5)
    (gradient,) = torch.autograd.grad(context[:, :, 50].sum(), key)
    reached = gradient.abs().sum((0, 1, 3)) > 0
    assert reached.nonzero().flatten().tolist() == list(range(46, 55))
