"""Per-layer hidden states and attention maps of a `BertEncoder`, read through forward hooks.

The encoder's forward stays as it is (fused attention, no extra outputs) for every other user;
distillation attaches taps for the duration of one forward. Attention probabilities are not
materialised by `scaled_dot_product_attention`, so they are recomputed from each attention
block's input and its own `qkv` projection, and only when asked for.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from lightning_modules.models.encoder import AttentionMask, BertEncoder, SelfAttention
from lightning_modules.models.local_attention import LocalWindow
from lightning_modules.models.rotary import RotaryTables, apply_rotary


@dataclass
class Tapped:
    """What one forward produced: `hidden[0]` is the embedding output, `hidden[i]` layer i's."""

    hidden: list[torch.Tensor] = field(default_factory=list)
    attention_inputs: list[AttentionInput] = field(default_factory=list)

    def attention(self, layer: int) -> torch.Tensor:
        """Layer `layer`'s (0-based) attention probabilities, `(batch, heads, query, key)`."""
        return attention_probabilities(self.attention_inputs[layer])


@dataclass(frozen=True)
class AttentionInput:
    """What one attention block was called with: enough to recompute its probabilities."""

    block: SelfAttention
    hidden: torch.Tensor
    mask: AttentionMask
    rotary: RotaryTables | None  # the rotary tables its queries and keys were rotated by


def attention_probabilities(called: AttentionInput) -> torch.Tensor:
    """softmax(QK^T / sqrt(d)) as `F.scaled_dot_product_attention` computes it inside, with the
    block's rotary positions applied (a sliding-window layer's plan as its dense mask)."""
    block, hidden, mask = called.block, called.hidden, called.mask
    if isinstance(mask, LocalWindow):
        mask = mask.dense()
    batch, seq_len, _ = hidden.shape
    qkv = block.qkv(hidden).view(batch, seq_len, 3, block.num_heads, block.head_dim)
    query, key, _ = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    if called.rotary is not None:
        query, key = apply_rotary(query, called.rotary), apply_rotary(key, called.rotary)
    scores = query @ key.transpose(-1, -2) / math.sqrt(block.head_dim)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return scores.float().softmax(-1)


@contextmanager
def tapped(encoder: BertEncoder, attention: bool = False) -> Iterator[Tapped]:
    """Records `encoder`'s hidden states (and attention inputs) during the forwards inside."""
    record = Tapped()
    handles: list[Any] = []

    def keep_output(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
        record.hidden.append(output)

    handles.append(encoder.embedding_projection.register_forward_hook(keep_output))
    # A shared block (ALBERT) runs once per layer: its hook fires once per layer too.
    for layer in encoder.layers:
        handles.append(layer.register_forward_hook(keep_output))
        if attention:
            block = cast(SelfAttention, layer.attention)

            def keep_input(module: nn.Module, inputs: Any, block: SelfAttention = block) -> None:
                rotary = inputs[2] if len(inputs) > 2 else None
                record.attention_inputs.append(AttentionInput(block, inputs[0], inputs[1], rotary))

            handles.append(block.register_forward_pre_hook(keep_input))

    def final_output(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
        record.hidden[-1] = output  # after the final norm of a pre-LN encoder

    handles.append(encoder.register_forward_hook(final_output))
    try:
        yield record
    finally:
        for handle in handles:
            handle.remove()
