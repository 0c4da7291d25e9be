"""Export of a ModernBERT-shaped masked LM as `transformers`' `ModernBertForMaskedLM`.

Our layer layout matches ModernBERT's (a fused QKV projection in the same (3, heads, head_dim)
order, GeGLU's up-projection with the value half first), so every tensor is copied as it is; only
the names change (hf_layouts.py). `modernbert_gaps` lists what the class lacks for a model;
export.py refuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from lightning_modules.hf_configs import MODERNBERT_KEYS, hf_values
from lightning_modules.hf_layouts import (
    Tensors,
    head_tensors,
    modernbert_encoder_layout,
    to_theirs,
)
from lightning_modules.models.config import GLOBAL, EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM

ARCHITECTURE = "ModernBertForMaskedLM"


def modernbert_gaps(config: EncoderConfig) -> list[str]:
    """What `ModernBertForMaskedLM` lacks to compute this model, one phrase per option."""
    gaps = []
    if config.position_embedding != "rotary":
        gaps.append(
            f"learned absolute positions (model.position_embedding={config.position_embedding})"
        )
    if config.feed_forward != "geglu":
        gaps.append(f"an ungated feed-forward (model.feed_forward={config.feed_forward})")
    if config.norm_placement != "pre":
        gaps.append(f"post-LN blocks (model.norm_placement={config.norm_placement})")
    if config.first_attention_norm:
        gaps.append("a norm before layer 0's attention (model.first_attention_norm=true)")
    if config.type_vocab_size:
        gaps.append(f"token-type embeddings (model.type_vocab_size={config.type_vocab_size})")
    if config.factorised_embeddings:
        gaps.append(f"factorised embeddings (model.embedding_size={config.embedding_size})")
    if config.share_layers:
        gaps.append("cross-layer sharing (model.share_layers=true)")
    return gaps


def modernbert_tensors(model: BertForMaskedLM) -> Tensors:
    """Our state under `transformers`' names; a tied decoder weight is left for it to re-tie."""
    encoder = to_theirs(model.encoder.state_dict(), modernbert_encoder_layout(model.config))
    return {**encoder, **head_tensors(model.head, "modernbert", model.config)}


def special_token_ids(
    tokenizer_file: Path, special_tokens: dict[str, str]
) -> dict[str, int | None]:
    """Role ("cls", "sep", ...) to id, as the tokenizer artifact assigns them."""
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    return {role: tokenizer.token_to_id(token) for role, token in special_tokens.items()}


def modernbert_config(config: EncoderConfig, ids: dict[str, int | None]) -> dict[str, Any]:
    """config.json of the ModernBertForMaskedLM that computes what a model of `config` does."""
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "modernbert",
        **hf_values(config, MODERNBERT_KEYS),
        "decoder_bias": True,
        **modernbert_layer_fields(config),
        "cls_token_id": ids.get("cls"),
        "sep_token_id": ids.get("sep"),
        "bos_token_id": ids.get("cls"),
        "eos_token_id": ids.get("sep"),
    }


def modernbert_layer_fields(config: EncoderConfig) -> dict[str, Any]:
    """Which layers attend in a sliding window, and each kind's RoPE base."""
    return {
        "layer_types": [
            "full_attention" if config.layer_kind(index) == GLOBAL else "sliding_attention"
            for index in range(config.num_layers)
        ],
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": config.rope_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": config.local_rope_theta},
        },
    }
