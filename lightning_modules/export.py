"""Export to the Hugging Face `transformers` format: a folder `from_pretrained` can load.

The files are written directly (config.json, model.safetensors with `transformers`' parameter
names, tokenizer files), so exporting needs neither `transformers` nor a hub; only loading does.
A masked LM is written as the `transformers` class that computes the same function: BERT;
ALBERT when layers are shared; ELECTRA's generator class when embeddings are factorised only;
RoFormer when it is BERT with rotary positions (export_roformer.py); ModernBERT when it uses the
ModernBERT options (export_modernbert.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from lightning_modules.export_modernbert import ARCHITECTURE as MODERNBERT
from lightning_modules.export_modernbert import (
    modernbert_config,
    modernbert_gaps,
    modernbert_tensors,
    special_token_ids,
)
from lightning_modules.export_roformer import ARCHITECTURE as ROFORMER
from lightning_modules.export_roformer import (
    interleave_rotary_pairs,
    position_table,
    roformer_fields,
    roformer_gaps,
)
from lightning_modules.models.electra import ElectraForPreTraining
from lightning_modules.models.encoder import BertEncoder, EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM, MaskedLMHead

Tensors = dict[str, torch.Tensor]

BERT_QKV = ("attention.self.query", "attention.self.key", "attention.self.value")
BERT_LAYER_NAMES = {
    "attention.out": "attention.output.dense",
    "attention_norm": "attention.output.LayerNorm",
    "feed_forward.up": "intermediate.dense",
    "feed_forward.down": "output.dense",
    "feed_forward_norm": "output.LayerNorm",
}
ALBERT_QKV = ("attention.query", "attention.key", "attention.value")
ALBERT_LAYER_NAMES = {
    "attention.out": "attention.dense",
    "attention_norm": "attention.LayerNorm",
    "feed_forward.up": "ffn",
    "feed_forward.down": "ffn_output",
    "feed_forward_norm": "full_layer_layer_norm",
}
ALBERT_LAYER = "albert.encoder.albert_layer_groups.0.albert_layers.0."
ALBERT_MAPPING = "albert.encoder.embedding_hidden_mapping_in"


def copied(tensor: torch.Tensor) -> torch.Tensor:
    """An independent contiguous copy: safetensors refuses tensors that share memory."""
    return tensor.detach().clone().contiguous()


def weight_and_bias(module: nn.Module, name: str) -> Tensors:
    return {f"{name}.{kind}": copied(getattr(module, kind)) for kind in ("weight", "bias")}


def embedding_tensors(encoder: BertEncoder, prefix: str) -> Tensors:
    """The word, token-type and (without rotary positions) position tables, and their norm."""
    embeddings = encoder.embeddings
    # Token-type-free models have been refused (hf_config, roformer_gaps) before any copy.
    assert embeddings.token_type is not None
    positions = (
        {}
        if embeddings.position is None
        else {f"{prefix}position_embeddings.weight": copied(embeddings.position.weight)}
    )
    return {
        f"{prefix}word_embeddings.weight": copied(embeddings.word.weight),
        **positions,
        f"{prefix}token_type_embeddings.weight": copied(embeddings.token_type.weight),
        **weight_and_bias(embeddings.norm, f"{prefix}LayerNorm"),
    }


def layer_tensors(
    layer: nn.Module, prefix: str, qkv: tuple[str, ...], names: dict[str, str]
) -> Tensors:
    """One block under `transformers`' names; our fused QKV projection is split into three."""
    tensors: Tensors = {}
    for kind in ("weight", "bias"):
        fused = getattr(layer.get_submodule("attention.qkv"), kind)
        for part, tensor in zip(qkv, fused.chunk(3), strict=True):
            tensors[f"{prefix}{part}.{kind}"] = copied(tensor)
    for ours, theirs in names.items():
        tensors.update(weight_and_bias(layer.get_submodule(ours), prefix + theirs))
    return tensors


def bert_body_tensors(encoder: BertEncoder, prefix: str) -> Tensors:
    """Embeddings and every layer in BERT's layout (also ELECTRA's); shared layers unrolled."""
    tensors = embedding_tensors(encoder, f"{prefix}embeddings.")
    if encoder.config.factorised_embeddings:  # only ELECTRA has this projection
        tensors.update(weight_and_bias(encoder.embedding_projection, f"{prefix}embeddings_project"))
    for index in range(encoder.config.num_layers):
        layer = encoder.layers[index % len(encoder.layers)]
        layer_prefix = f"{prefix}encoder.layer.{index}."
        tensors.update(layer_tensors(layer, layer_prefix, BERT_QKV, BERT_LAYER_NAMES))
    return tensors


def albert_body_tensors(encoder: BertEncoder) -> Tensors:
    """ALBERT with one layer group of one layer: our single shared block."""
    hidden = encoder.config.hidden_size
    mapping = (
        weight_and_bias(encoder.embedding_projection, ALBERT_MAPPING)
        if encoder.config.factorised_embeddings
        # ALBERT always maps E -> H; with E == H the identity keeps the numbers.
        else {
            f"{ALBERT_MAPPING}.weight": torch.eye(hidden),
            f"{ALBERT_MAPPING}.bias": torch.zeros(hidden),
        }
    )
    return {
        **embedding_tensors(encoder, "albert.embeddings."),
        **mapping,
        **layer_tensors(encoder.layers[0], ALBERT_LAYER, ALBERT_QKV, ALBERT_LAYER_NAMES),
    }


def head_tensors(head: MaskedLMHead, transform: str, norm: str, bias: str) -> Tensors:
    """The MLM head; the tied decoder weight is left out, `transformers` re-ties it."""
    return {
        **weight_and_bias(head.transform, transform),
        **weight_and_bias(head.norm, norm),
        bias: copied(head.bias),
    }


BERT_SHAPE = EncoderConfig(vocab_size=1)  # BERT's value of every ModernBERT option
MODERN_KEYS = (
    "position_embedding",
    "feed_forward",
    "linear_bias",
    "norm_bias",
    "first_attention_norm",
    "global_attention_every",
)


def modern_options(config: EncoderConfig) -> list[str]:
    """The ModernBERT options this config sets away from BERT's values (training-only ones,
    such as `document_attention`, aside): a model with any of them exports as RoFormer or
    ModernBERT, or not at all (`rotary_class`)."""
    changed = [key for key in MODERN_KEYS if getattr(config, key) != getattr(BERT_SHAPE, key)]
    if config.type_vocab_size == 0:
        changed.append("type_vocab_size")
    return [f"model.{key}={getattr(config, key)}" for key in changed]


def rotary_class(config: EncoderConfig) -> tuple[str, list[str]]:
    """Of RoFormer and ModernBERT, the class closest to a model with ModernBERT options (fewest
    gaps, RoFormer on a tie) and what it lacks; nothing lacking: the model exports as it."""
    candidates = ((ROFORMER, roformer_gaps(config)), (MODERNBERT, modernbert_gaps(config)))
    return min(candidates, key=lambda candidate: len(candidate[1]))


def can_export(model: nn.Module) -> bool:
    """Whether `export_huggingface` has a `transformers` class that computes what `model` does."""
    config = model.config
    assert isinstance(config, EncoderConfig)
    if modern_options(config):
        return isinstance(model, BertForMaskedLM) and not rotary_class(config)[1]
    return config.norm_placement == "post"


def hf_config(config: EncoderConfig, architecture: str, **extra: Any) -> dict[str, Any]:
    """config.json of a BERT-family class with learned positions; refuses any other option."""
    if config.norm_placement != "post":
        raise ValueError(
            f"model.norm_placement={config.norm_placement} has no {architecture} equivalent; "
            "export needs the post-LN (BERT) placement"
        )
    if modern_options(config):
        raise ValueError(f"{architecture} has no equivalent of {', '.join(modern_options(config))}")
    return bert_family_config(config, architecture, position_embedding_type="absolute", **extra)


def bert_family_config(config: EncoderConfig, architecture: str, **extra: Any) -> dict[str, Any]:
    """The config.json entries BERT, ALBERT, ELECTRA and RoFormer share."""
    return {
        "architectures": [architecture],
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": "gelu",  # exact erf gelu, as ours; ALBERT's default gelu_new differs
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.attention_dropout,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": config.pad_token_id,
        "tie_word_embeddings": True,
        **extra,
    }


# The MLM head's transform, LayerNorm and bias in each `transformers` masked LM.
HEAD_NAMES = {
    "albert": ("predictions.dense", "predictions.LayerNorm", "predictions.bias"),
    "electra": (
        "generator_predictions.dense",
        "generator_predictions.LayerNorm",
        "generator_lm_head.bias",
    ),
    "bert": (
        "cls.predictions.transform.dense",
        "cls.predictions.transform.LayerNorm",
        "cls.predictions.bias",
    ),
}


def masked_lm_export(model: BertForMaskedLM) -> tuple[Tensors, dict[str, Any]]:
    """Tensors and config.json of the `transformers` masked LM that computes what `model` does:
    ALBERT for shared layers, ELECTRA's generator for factorised embeddings, else BERT."""
    config, encoder, head = model.config, model.encoder, model.head
    extra: dict[str, Any] = {"embedding_size": config.embedding_width}
    if config.share_layers:
        model_type = "albert"
        extra |= {"num_hidden_groups": 1, "inner_group_num": 1}
    elif config.factorised_embeddings:
        model_type = "electra"
    else:
        model_type, extra = "bert", {}
    hf = hf_config(config, f"{model_type.capitalize()}ForMaskedLM", model_type=model_type, **extra)
    body = (
        albert_body_tensors(encoder)
        if model_type == "albert"
        else bert_body_tensors(encoder, f"{model_type}.")
    )
    return {**body, **head_tensors(head, *HEAD_NAMES[model_type])}, hf


def roformer_export(model: BertForMaskedLM) -> tuple[Tensors, dict[str, Any]]:
    """BERT's tensors under the `roformer.` prefix, query and key rows in RoFormer's pair order,
    and the sinusoid table in place of the position table."""
    config, encoder = model.config, model.encoder
    body = interleave_rotary_pairs(bert_body_tensors(encoder, "roformer."), config)
    hf = bert_family_config(config, ROFORMER, **roformer_fields(config))
    head = head_tensors(model.head, *HEAD_NAMES["bert"])
    return {**body, **position_table(encoder), **head}, hf


def electra_export(model: ElectraForPreTraining) -> tuple[Tensors, dict[str, Any]]:
    """The discriminator (what fine-tuning uses) as `ElectraForPreTraining`."""
    config, head = model.config, model.discriminator_head
    hf = hf_config(
        config,
        "ElectraForPreTraining",
        model_type="electra",
        embedding_size=config.embedding_width,
    )
    tensors = {
        **bert_body_tensors(model.discriminator, "electra."),
        **weight_and_bias(head.dense, "discriminator_predictions.dense"),
        **weight_and_bias(head.prediction, "discriminator_predictions.dense_prediction"),
    }
    return tensors, hf


def export_huggingface(
    model: BertForMaskedLM | ElectraForPreTraining,
    tokenizer_file: Path,
    special_tokens: dict[str, str],
    tokenizer_kind: str,
    lowercase: bool,
    directory: Path,
) -> None:
    """A masked LM as BertForMaskedLM, AlbertForMaskedLM, ElectraForMaskedLM,
    RoFormerForMaskedLM or ModernBertForMaskedLM by its shape; an ELECTRA model as
    ElectraForPreTraining (its discriminator)."""
    if isinstance(model, BertForMaskedLM) and modern_options(model.config):
        architecture, gaps = rotary_class(model.config)
        if gaps:
            raise ValueError(
                f"{architecture} cannot represent this model; it lacks {'; '.join(gaps)}"
            )
        if architecture == ROFORMER:
            tensors, config = roformer_export(model)
        else:
            tensors = modernbert_tensors(model)
            config = modernbert_config(
                model.config, special_token_ids(tokenizer_file, special_tokens)
            )
    elif isinstance(model, ElectraForPreTraining):
        tensors, config = electra_export(model)
    else:
        tensors, config = masked_lm_export(model)
    write_folder(
        tensors, config, tokenizer_file, special_tokens, tokenizer_kind, lowercase, directory
    )


def write_folder(
    tensors: Tensors,
    config: dict[str, Any],
    tokenizer_file: Path,
    special_tokens: dict[str, str],
    tokenizer_kind: str,
    lowercase: bool,
    directory: Path,
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(config, indent=2))
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
                "model_max_length": config["max_position_embeddings"],
                **token_names,
            },
            indent=2,
        )
    )
