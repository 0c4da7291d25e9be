"""Which `config.json` key of each `transformers` family holds each encoder option, read in both
directions (export.py writes config.json with it, transformers_import reads it).

A table maps an `EncoderConfig` field to one key, or to several that must agree (ModernBERT's
attention, MLP and head biases are one `linear_bias` here). What a family fixes (ModernBERT's
rotary positions, DistilBERT's LayerNorm epsilon) or spells in its own way (ModernBERT's layer
types and RoPE bases, RoBERTa's position offset) is its family's code, not a table entry.
"""

from __future__ import annotations

from typing import Any

from lightning_modules.models.config import EncoderConfig

KeyTable = dict[str, tuple[str, ...]]

# `transformers`' activation names for ours: what export writes ...
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new"}
# ... and every name that is one of our two functions, what import reads.
ACTIVATIONS_READ = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_python_tanh": "gelu_tanh",
}

COMMON_KEYS: KeyTable = {
    "vocab_size": ("vocab_size",),
    "max_position_embeddings": ("max_position_embeddings",),
    "initializer_range": ("initializer_range",),
    "pad_token_id": ("pad_token_id",),
    "tie_word_embeddings": ("tie_word_embeddings",),
}
# BERT's keys, also RoBERTa's, XLM-R's, ELECTRA's, ALBERT's and RoFormer's.
BERT_KEYS: KeyTable = {
    **COMMON_KEYS,
    "hidden_size": ("hidden_size",),
    "num_layers": ("num_hidden_layers",),
    "num_heads": ("num_attention_heads",),
    "intermediate_size": ("intermediate_size",),
    "dropout": ("hidden_dropout_prob",),
    "attention_dropout": ("attention_probs_dropout_prob",),
    "type_vocab_size": ("type_vocab_size",),
    "layer_norm_eps": ("layer_norm_eps",),
    "activation": ("hidden_act",),
}
DISTILBERT_KEYS: KeyTable = {
    **COMMON_KEYS,
    "hidden_size": ("dim",),
    "num_layers": ("n_layers",),
    "num_heads": ("n_heads",),
    "intermediate_size": ("hidden_dim",),
    "dropout": ("dropout",),
    "attention_dropout": ("attention_dropout",),
    "activation": ("activation",),
}
MODERNBERT_KEYS: KeyTable = {
    **COMMON_KEYS,
    "hidden_size": ("hidden_size",),
    "num_layers": ("num_hidden_layers",),
    "num_heads": ("num_attention_heads",),
    "intermediate_size": ("intermediate_size",),
    "dropout": ("embedding_dropout", "mlp_dropout"),
    "attention_dropout": ("attention_dropout",),
    "layer_norm_eps": ("norm_eps",),
    "norm_bias": ("norm_bias",),
    "linear_bias": ("attention_bias", "mlp_bias", "classifier_bias"),
    "local_attention": ("local_attention",),
    "activation": ("hidden_activation", "classifier_activation"),
}


def hf_values(config: EncoderConfig, table: KeyTable) -> dict[str, Any]:
    """The config.json entries of `table` for `config`, activations in `transformers`' names."""
    values: dict[str, Any] = {}
    for ours, keys in table.items():
        value = getattr(config, ours)
        for key in keys:
            values[key] = HF_ACTIVATIONS[value] if ours == "activation" else value
    return values
