"""Export of a ModernBERT-shaped masked LM as `transformers`' `ModernBertForMaskedLM`.

Our layer layout matches ModernBERT's (a fused QKV projection in the same (3, heads, head_dim)
order, GeGLU's up-projection with the value half first), so every tensor is copied as it is; only
the names change. `modernbert_gaps` lists what the class lacks for a model; export.py refuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from lightning_modules.models.encoder import GLOBAL, EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM

Tensors = dict[str, torch.Tensor]
ARCHITECTURE = "ModernBertForMaskedLM"
LAYER_NAMES = {
    "attention_norm": "attn_norm",
    "attention.qkv": "attn.Wqkv",
    "attention.out": "attn.Wo",
    "feed_forward_norm": "mlp_norm",
    "feed_forward.up": "mlp.Wi",
    "feed_forward.down": "mlp.Wo",
}


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
    """Our state under `transformers`' names; the tied decoder weight is left for it to re-tie."""
    renamed: Tensors = {}
    for name, tensor in model.state_dict().items():
        if name == "head.word_embeddings.weight":
            continue
        renamed[hf_name(name)] = tensor.detach().clone().contiguous()
    return renamed


def hf_name(name: str) -> str:
    if name.startswith("encoder.embeddings."):
        return name.replace("encoder.embeddings.word.", "model.embeddings.tok_embeddings.").replace(
            "encoder.embeddings.norm.", "model.embeddings.norm."
        )
    if name.startswith("encoder.final_norm."):
        return "model." + name[len("encoder.") :]
    if name.startswith("encoder.layers."):
        index, rest = name[len("encoder.layers.") :].split(".", 1)
        module, kind = rest.rsplit(".", 1)
        return f"model.layers.{index}.{LAYER_NAMES[module]}.{kind}"
    heads = {
        "head.transform.": "head.dense.",
        "head.norm.": "head.norm.",
        "head.bias": "decoder.bias",
    }
    for ours, theirs in heads.items():
        if name.startswith(ours):
            return theirs + name[len(ours) :]
    raise ValueError(f"no {ARCHITECTURE} parameter corresponds to {name}")


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
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "hidden_activation": "gelu",  # exact erf gelu, as ours
        "classifier_activation": "gelu",
        "max_position_embeddings": config.max_position_embeddings,
        "initializer_range": config.initializer_range,
        "norm_eps": config.layer_norm_eps,
        "norm_bias": config.norm_bias,
        "attention_bias": config.linear_bias,
        "mlp_bias": config.linear_bias,
        "classifier_bias": config.linear_bias,
        "decoder_bias": True,
        "attention_dropout": config.attention_dropout,
        "embedding_dropout": config.dropout,
        "mlp_dropout": config.dropout,
        "local_attention": config.local_attention,
        "layer_types": [
            "full_attention" if config.layer_kind(index) == GLOBAL else "sliding_attention"
            for index in range(config.num_layers)
        ],
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": config.rope_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": config.local_rope_theta},
        },
        "pad_token_id": config.pad_token_id,
        "cls_token_id": ids.get("cls"),
        "sep_token_id": ids.get("sep"),
        "bos_token_id": ids.get("cls"),
        "eos_token_id": ids.get("sep"),
        "tie_word_embeddings": True,
    }
