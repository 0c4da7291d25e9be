"""What export needs to write a BERT-shaped rotary model as `transformers`' `RoFormerForMaskedLM`.

RoFormer is BERT (post-LN, erf GELU, biases, token types) with rotary positions at base 10000 in
place of the position table. Its rotary pairs are interleaved, dimensions (2i, 2i+1) of a head,
where ours are split in halves, (i, i + d/2) (`models/rotary.py`); both rotate pair i by
position / 10000^(2i/d) in the same direction. Reordering each head's query and key output rows
(new 2i = old i, new 2i+1 = old i + d/2) therefore gives the same attention scores; values keep
their order. The tensors themselves are BERT's (export.py); this module holds the differences.
"""

from __future__ import annotations

from typing import Any

import torch

from lightning_modules.models.config import GLOBAL, EncoderConfig
from lightning_modules.models.encoder import BertEncoder

Tensors = dict[str, torch.Tensor]
ARCHITECTURE = "RoFormerForMaskedLM"
ROPE_THETA = 10_000.0  # RoFormer's sinusoidal table has this base built in
ROTATED = ("attention.self.query", "attention.self.key")
POSITION_TABLE = "roformer.encoder.embed_positions.weight"


# Each option RoFormer fixes: the value it needs, and what it lacks for any other.
REQUIRED: dict[str, tuple[object, str]] = {
    "position_embedding": ("rotary", "learned absolute positions"),
    "rope_theta": (ROPE_THETA, "a RoPE base other than 10000"),
    "norm_placement": ("post", "pre-LN blocks"),
    "feed_forward": ("gelu", "a gated feed-forward"),
    "linear_bias": (True, "bias-free linears"),
    "norm_bias": (True, "shift-free LayerNorms"),
}


def roformer_gaps(config: EncoderConfig) -> list[str]:
    """What `RoFormerForMaskedLM` lacks to compute this model, one phrase per option."""
    gaps = [
        f"{lacks} (model.{key}={yaml_value(getattr(config, key))})"
        for key, (needed, lacks) in REQUIRED.items()
        if getattr(config, key) != needed
    ]
    if config.has_local_layers:
        every = config.global_attention_every
        gaps.append(f"sliding-window layers (model.global_attention_every={every})")
    if not config.type_vocab_size:
        gaps.append("embeddings without token types (model.type_vocab_size=0)")
    return gaps


def yaml_value(value: object) -> str:
    """A value as the config spells it (true/false), so the message can be pasted back."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def interleaved_order(num_heads: int, head_dim: int) -> torch.Tensor:
    """Output-row order that moves each head's rotary pair (i, i + d/2) to (2i, 2i+1)."""
    half = torch.arange(head_dim // 2)
    within_head = torch.stack((half, half + head_dim // 2), dim=1).reshape(-1)
    return (torch.arange(num_heads)[:, None] * head_dim + within_head).reshape(-1)


def interleave_rotary_pairs(
    tensors: Tensors, config: EncoderConfig, inverse: bool = False
) -> Tensors:
    """BERT-named tensors with every query and key projection's rows (and biases) reordered;
    `inverse`: back from RoFormer's order to ours (import)."""
    order = interleaved_order(config.num_heads, config.hidden_size // config.num_heads)
    if inverse:
        order = order.argsort()
    return {
        name: tensor[order].contiguous() if name.rsplit(".", 1)[0].endswith(ROTATED) else tensor
        for name, tensor in tensors.items()
    }


def position_table(encoder: BertEncoder) -> Tensors:
    """RoFormer's sinusoid table (each pair's sin, then its cos) from our own frequencies.

    `transformers` would rebuild it if absent, but reports it as newly initialised weights; ours
    also keeps the export's angles bit-equal to our fp32 ones (test_export_roformer.py checks
    the table against RoFormer's own)."""
    assert encoder.rotary is not None  # roformer_gaps has refused learned positions
    cos, sin = encoder.rotary[GLOBAL](torch.arange(encoder.config.max_position_embeddings))
    half = cos.shape[-1] // 2
    return {POSITION_TABLE: torch.cat((sin[:, :half], cos[:, :half]), dim=-1).contiguous()}


def roformer_fields(config: EncoderConfig) -> dict[str, Any]:
    """config.json entries RoFormer has beyond BERT's (its position table is the sinusoid)."""
    return {"model_type": "roformer", "embedding_size": config.embedding_width}
