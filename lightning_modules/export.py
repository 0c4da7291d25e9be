"""Export to the Hugging Face `transformers` format: a folder `from_pretrained` can load.

The files are written directly (config.json, model.safetensors with BERT's parameter names,
tokenizer files), so exporting needs neither `transformers` nor a hub; only loading does.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from lightning_modules.models.heads import BertForMaskedLM

LAYER_NAMES = {
    "attention.out": "attention.output.dense",
    "attention_norm": "attention.output.LayerNorm",
    "feed_forward.up": "intermediate.dense",
    "feed_forward.down": "output.dense",
    "feed_forward_norm": "output.LayerNorm",
}
TOP_NAMES = {
    "encoder.embeddings.word.weight": "bert.embeddings.word_embeddings.weight",
    "encoder.embeddings.position.weight": "bert.embeddings.position_embeddings.weight",
    "encoder.embeddings.token_type.weight": "bert.embeddings.token_type_embeddings.weight",
    "encoder.embeddings.norm.weight": "bert.embeddings.LayerNorm.weight",
    "encoder.embeddings.norm.bias": "bert.embeddings.LayerNorm.bias",
    "head.transform.weight": "cls.predictions.transform.dense.weight",
    "head.transform.bias": "cls.predictions.transform.dense.bias",
    "head.norm.weight": "cls.predictions.transform.LayerNorm.weight",
    "head.norm.bias": "cls.predictions.transform.LayerNorm.bias",
    "head.bias": "cls.predictions.bias",
}


def transformers_state_dict(model: BertForMaskedLM) -> dict[str, torch.Tensor]:
    """Our parameters under `BertForMaskedLM`'s names; the fused QKV is split into three."""
    if model.config.norm_placement != "post":
        raise ValueError(
            "model.norm_placement=pre has no BertForMaskedLM equivalent; "
            "export needs the post-LN (BERT) placement"
        )
    state = {
        name: tensor.detach().clone().contiguous() for name, tensor in model.state_dict().items()
    }
    exported = {target: state[source] for source, target in TOP_NAMES.items()}
    for index in range(model.config.num_layers):
        ours, theirs = f"encoder.layers.{index}.", f"bert.encoder.layer.{index}."
        for kind in ("weight", "bias"):
            query, key, value = state[f"{ours}attention.qkv.{kind}"].chunk(3, dim=0)
            for part, tensor in (("query", query), ("key", key), ("value", value)):
                exported[f"{theirs}attention.self.{part}.{kind}"] = tensor.contiguous()
            for source, target in LAYER_NAMES.items():
                exported[f"{theirs}{target}.{kind}"] = state[f"{ours}{source}.{kind}"]
    return exported


def bert_config(model: BertForMaskedLM) -> dict[str, object]:
    config = model.config
    return {
        "architectures": ["BertForMaskedLM"],
        "model_type": "bert",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": "gelu",
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.attention_dropout,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    }


def export_masked_lm(
    model: BertForMaskedLM,
    tokenizer_file: Path,
    special_tokens: dict[str, str],
    tokenizer_kind: str,
    lowercase: bool,
    directory: Path,
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    save_file(
        transformers_state_dict(model),
        str(directory / "model.safetensors"),
        metadata={"format": "pt"},
    )
    (directory / "config.json").write_text(json.dumps(bert_config(model), indent=2))
    shutil.copyfile(tokenizer_file, directory / "tokenizer.json")
    token_names = {f"{role}_token": token for role, token in special_tokens.items()}
    (directory / "special_tokens_map.json").write_text(json.dumps(token_names, indent=2))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                # BERT's class only fits WordPiece; the generic fast class loads any tokenizer.json.
                "tokenizer_class": "BertTokenizerFast"
                if tokenizer_kind == "wordpiece"
                else "PreTrainedTokenizerFast",
                "do_lower_case": lowercase,
                "model_max_length": model.config.max_position_embeddings,
                **token_names,
            },
            indent=2,
        )
    )
