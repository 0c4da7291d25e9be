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
from lightning_modules.hf_configs import BERT_KEYS, hf_values
from lightning_modules.hf_layouts import (
    ALBERT_MAPPING,
    Tensors,
    albert_encoder_layout,
    bert_encoder_layout,
    discriminator_layout,
    head_tensors,
    to_theirs,
)
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.electra import ElectraForPreTraining
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.models.heads import BertForMaskedLM


def bert_body_tensors(encoder: BertEncoder, prefix: str) -> Tensors:
    """Embeddings and every layer in BERT's layout (also ELECTRA's); shared layers unrolled."""
    return to_theirs(encoder.state_dict(), bert_encoder_layout(encoder.config, prefix))


def albert_body_tensors(encoder: BertEncoder) -> Tensors:
    """ALBERT with one layer group of one layer: our single shared block."""
    hidden = encoder.config.hidden_size
    tensors = to_theirs(encoder.state_dict(), albert_encoder_layout(encoder.config))
    if not encoder.config.factorised_embeddings:
        # ALBERT always maps E -> H; with E == H the identity keeps the numbers.
        tensors[f"{ALBERT_MAPPING}.weight"] = torch.eye(hidden)
        tensors[f"{ALBERT_MAPPING}.bias"] = torch.zeros(hidden)
    return tensors


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
    if isinstance(model, BertForMaskedLM) and generator_head_gap(config):
        return False
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
    return {"architectures": [architecture], **hf_values(config, BERT_KEYS), **extra}


def generator_head_gap(config: EncoderConfig) -> str | None:
    """Why `ElectraForMaskedLM` cannot hold a masked LM of this shape, if it is the class that
    would: its head applies erf gelu whatever `hidden_act` says."""
    if config.share_layers or not config.factorised_embeddings or config.activation == "gelu":
        return None
    return f"ElectraForMaskedLM's head applies erf gelu, not model.activation={config.activation}"


def masked_lm_export(model: BertForMaskedLM) -> tuple[Tensors, dict[str, Any]]:
    """Tensors and config.json of the `transformers` masked LM that computes what `model` does:
    ALBERT for shared layers, ELECTRA's generator for factorised embeddings, else BERT."""
    config, encoder, head = model.config, model.encoder, model.head
    gap = generator_head_gap(config)
    if gap:
        raise ValueError(gap)
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
    return {**body, **head_tensors(head, model_type, config)}, hf


def roformer_export(model: BertForMaskedLM) -> tuple[Tensors, dict[str, Any]]:
    """BERT's tensors under the `roformer.` prefix, query and key rows in RoFormer's pair order,
    and the sinusoid table in place of the position table."""
    config, encoder = model.config, model.encoder
    body = interleave_rotary_pairs(bert_body_tensors(encoder, "roformer."), config)
    hf = bert_family_config(config, ROFORMER, **roformer_fields(config))
    head = head_tensors(model.head, "roformer", config)
    return {**body, **position_table(encoder), **head}, hf


def discriminator_tensors(model: ElectraForPreTraining) -> Tensors:
    """The discriminator and its replaced-token head under `ElectraForPreTraining`'s names."""
    return {
        **bert_body_tensors(model.discriminator, "electra."),
        **to_theirs(model.discriminator_head.state_dict(), discriminator_layout()),
    }


def electra_export(model: ElectraForPreTraining) -> tuple[Tensors, dict[str, Any]]:
    """The discriminator (what fine-tuning uses) as `ElectraForPreTraining`."""
    config = model.config
    hf = hf_config(
        config,
        "ElectraForPreTraining",
        model_type="electra",
        embedding_size=config.embedding_width,
    )
    return discriminator_tensors(model), hf


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


def write_weights(tensors: Tensors, config: dict[str, Any], directory: Path) -> None:
    """model.safetensors and config.json: what `from_pretrained` reads besides the tokenizer."""
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def write_folder(
    tensors: Tensors,
    config: dict[str, Any],
    tokenizer_file: Path,
    special_tokens: dict[str, str],
    tokenizer_kind: str,
    lowercase: bool,
    directory: Path,
) -> None:
    write_weights(tensors, config, directory)
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
