"""Sliding-window attention in blocks: memory and time grow linearly with the row length.

A dense banded mask makes a local layer cost what a global one costs (seq_len x seq_len scores,
most of them masked). Here the queries are cut into blocks of `window // 2` positions, and each
block attends to its own block and its two neighbours: every key any of its queries can see, and
3 x block scores per query whatever the row length, so a row twice as long costs twice, not four
times. Masked keys get exactly zero weight, so the result equals dense attention under the banded
mask up to the order of floating-point sums
(`tests/unit/lightning_modules/models/test_local_attention.py`).

Each block goes through the fused attention kernel as one batch entry (rows x blocks, heads
inside), with a mask for the band's edges, the row's ends, padding and documents. Laid out so,
the blocks' queries and outputs are views of the `(batch, seq_len, heads, head_dim)` tensors
around them: no copies in or out. Measured on this CPU (4 heads x 64, 8,192 tokens, forward +
backward, 1 thread, 2026-12-01): 0.10-0.13 CPU-s at 512, 1,024 and 2,048 tokens per row, against
0.18 / 0.35 / 0.68 for SDPA under the dense band. Explicit matmuls with an additive bias were
slower and kept 1.5x the activations.

Memory: each block's keys and values with its neighbours' are not copied three times (24 of a
local layer's 79 MiB kept for backward at 4,096 tokens of modernbert-mini, before): they are
overlapping views of one padded copy of the keys and of the values, which is all SDPA keeps
(docs/results/2026-12-01-modernbert-memory.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LocalWindow:
    """One forward pass's plan for every sliding-window layer: which keys of each block's span
    each of its queries may see (the band, the row's ends, padding, documents)."""

    seq_len: int
    block: int
    allowed: torch.Tensor  # (batch or 1, blocks, block, 3 * block), True: may attend
    # The kernel's masks, built on first use and shared by every local layer of this forward.
    _kernel_masks: dict[tuple[int, torch.dtype], torch.Tensor] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def blocks(self) -> int:
        return self.allowed.shape[1]

    def kernel_mask(self, batch: int, dtype: torch.dtype) -> torch.Tensor:
        """`(batch * blocks, 1, block, 3 * block)`, broadcast over heads, additive (0 or -inf) in
        `dtype`: SDPA would convert a boolean mask so in every layer, and the fused CPU kernel
        keeps it for backward each time."""
        key = (batch, dtype)
        if key not in self._kernel_masks:
            allowed = self.allowed.expand(batch, -1, -1, -1).flatten(0, 1)[:, None]
            self._kernel_masks[key] = allowed.new_zeros((), dtype=dtype).masked_fill(
                ~allowed, float("-inf")
            )
        return self._kernel_masks[key]

    def dense(self) -> torch.Tensor:
        """The same permissions as a `(batch or 1, 1, query, key)` mask, for attention maps and
        tests; the kernel never builds it."""
        batch, padded = self.allowed.shape[0], self.blocks * self.block
        dense = self.allowed.new_zeros(batch, self.blocks, self.block, padded + 2 * self.block)
        for index in range(self.blocks):
            dense[:, index, :, index * self.block : (index + 3) * self.block] = self.allowed[
                :, index
            ]
        dense = dense.reshape(batch, padded, -1)[:, : self.seq_len]
        return dense[:, None, :, self.block : self.block + self.seq_len]


def local_window(
    seq_len: int,
    window: int,
    device: torch.device,
    key_mask: torch.Tensor | None = None,
    document_ids: torch.Tensor | None = None,
) -> LocalWindow:
    """The plan for `window`-wide attention (`window // 2` keys each side, as ModernBERT) over rows
    of `seq_len`; `key_mask` (batch, seq_len) marks real tokens, `document_ids` (batch, seq_len)
    each token's document. Built once per forward and shared by every local layer."""
    half = window // 2
    block = max(half, 1)
    blocks = -(-seq_len // block)
    span = torch.arange(3 * block, device=device)
    band = (span[None, :] - block - torch.arange(block, device=device)[:, None]).abs() <= half
    keys = torch.arange(blocks, device=device)[:, None] * block - block + span
    allowed = (band[None] & ((keys >= 0) & (keys < seq_len))[:, None, :])[None]
    if key_mask is not None:
        allowed = allowed & spans(key_mask.bool(), block, blocks, fill=False)[:, :, None, :]
    if document_ids is not None:
        queries = F.pad(document_ids, (0, blocks * block - seq_len), value=-1)
        documents = spans(document_ids, block, blocks, fill=-1)
        allowed = allowed & (queries.view(-1, blocks, block)[..., None] == documents[:, :, None])
    return LocalWindow(seq_len, block, allowed)


def spans(values: torch.Tensor, block: int, blocks: int, fill: int | bool) -> torch.Tensor:
    """`(batch, blocks, 3 * block)`: per block, the values at its own and its neighbours'
    positions; positions outside the row read `fill`."""
    padded = F.pad(values, (block, (blocks + 1) * block - values.shape[-1]), value=fill)
    return padded.unfold(-1, 3 * block, block)


def local_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    window: LocalWindow,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """`(batch, heads, seq_len, head_dim)` in and out: attention within `window`, block by block.

    A query that may see no key (a pad far from any real token) gets zeros, as SDPA gives it.
    The result is laid out `(batch, seq_len, heads, head_dim)` in memory, so merging the heads
    after a transpose is a view.
    """
    batch, _, seq_len, _ = query.shape
    context = F.scaled_dot_product_attention(
        block_queries(query, window),
        neighbourhoods(key, window),
        neighbourhoods(value, window),
        attn_mask=window.kernel_mask(batch, query.dtype),
        dropout_p=dropout_p,
    )
    return unblock(context, batch, seq_len)


def block_queries(query: torch.Tensor, window: LocalWindow) -> torch.Tensor:
    """`(batch * blocks, heads, block, head_dim)`: a view of the queries when the row fills
    whole blocks and they are laid out `(batch, seq_len, heads, head_dim)` (rotary's output)."""
    rows = query.transpose(1, 2)  # (batch, seq_len, heads, head_dim)
    padding = window.blocks * window.block - window.seq_len
    if padding:
        rows = F.pad(rows, (0, 0, 0, 0, 0, padding))
    return rows.unflatten(1, (window.blocks, window.block)).flatten(0, 1).transpose(1, 2)


def unblock(context: torch.Tensor, batch: int, seq_len: int) -> torch.Tensor:
    """The inverse of `block_queries`: `(batch, heads, seq_len, head_dim)`, the padding cut."""
    _, heads, _, head_dim = context.shape
    rows = context.transpose(1, 2).reshape(batch, -1, heads, head_dim)
    return rows[:, :seq_len].transpose(1, 2)


def neighbourhoods(keys: torch.Tensor, window: LocalWindow) -> torch.Tensor:
    """`(batch * blocks, heads, 3 * block, head_dim)`: each block's keys (or values) with its
    neighbours'."""
    return _Neighbourhoods.apply(keys, window.block, window.blocks)


def gather(keys: torch.Tensor, block: int, blocks: int) -> torch.Tensor:
    """`neighbourhoods` without autograd, as overlapping views of one padded copy.

    The rows are laid end to end with one block of zeros before and after, so block `i` of the
    whole batch spans positions `[i * block, (i + 3) * block)`: a single stride per dimension.
    At a row's first and last block this span reaches into the neighbouring row; those keys are
    outside the row, masked by the plan, and get exactly zero weight (and zero gradient).
    """
    batch, heads, seq_len, head_dim = keys.shape
    rows = keys.transpose(1, 2)  # (batch, seq_len, heads, head_dim)
    if blocks * block != seq_len:
        rows = F.pad(rows, (0, 0, 0, 0, 0, blocks * block - seq_len))
    flat = F.pad(rows.reshape(-1, heads, head_dim), (0, 0, 0, 0, block, block))
    spans = flat.as_strided(
        (batch * blocks, 3 * block, heads, head_dim),
        (block * heads * head_dim, heads * head_dim, head_dim, 1),
    )
    return spans.transpose(1, 2)


def scatter(gradient: torch.Tensor, batch: int, seq_len: int) -> torch.Tensor:
    """The gradient of `gather`: the three slices of each span summed into one buffer (autograd's
    own zero-fills a full-size buffer per slice, then the padding's: a third of a local layer's
    attention time on CPU)."""
    spans = gradient.transpose(1, 2)  # (batch * blocks, span, heads, head_dim)
    total, span, heads, head_dim = spans.shape
    block = span // 3
    padded = gradient.new_zeros(total + 2, block, heads, head_dim)
    padded[:-2] += spans[:, :block]
    padded[1:-1] += spans[:, block : 2 * block]
    padded[2:] += spans[:, 2 * block :]
    rows = padded[1:-1].view(batch, -1, heads, head_dim)
    return rows[:, :seq_len].transpose(1, 2)


class _Neighbourhoods(torch.autograd.Function):
    """`gather` with `scatter` as its backward."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, keys: torch.Tensor, block: int, blocks: int
    ) -> torch.Tensor:
        ctx.batch, ctx.seq_len = keys.shape[0], keys.shape[2]
        return gather(keys, block, blocks)

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, gradient: torch.Tensor
    ) -> tuple[torch.Tensor, None, None]:
        return scatter(gradient, ctx.batch, ctx.seq_len), None, None
