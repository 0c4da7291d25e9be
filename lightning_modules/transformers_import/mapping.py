"""Their tensors to ours and back: the shared layouts (hf_layouts.py) and, per family, what is
more than a rename.

RoBERTa's position table starts after the padding id (rows 0 .. pad are never read for a real
token); RoFormer orders each head's rotary pairs its own way and stores a sinusoid table; ALBERT
maps E -> H even at equal widths, where our encoder has no projection.
"""

from __future__ import annotations

import re
from typing import TypeVar

import torch

from lightning_modules.export import albert_body_tensors, bert_body_tensors
from lightning_modules.export_roformer import (
    POSITION_TABLE,
    interleave_rotary_pairs,
    position_table,
)
from lightning_modules.hf_layouts import (
    ALBERT_MAPPING,
    DISCRIMINATOR_NAMES,
    HEAD_NAMES,
    PREFIXES,
    Tensors,
    encoder_layout,
    to_theirs,
)
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.transformers_import.config_json import position_offset
from lightning_modules.transformers_import.errors import CheckpointError
from lightning_modules.transformers_import.families import Family

LEGACY_SUFFIXES = re.compile(r"\.(gamma|beta)$")  # TF-era LayerNorm names
BUFFERS = ("position_ids", "token_type_ids")  # saved by older versions, never weights
Value = TypeVar("Value")  # a tensor, or only its shape (preflight.py reads the headers)


def their_roots(family: Family) -> tuple[str, ...]:
    """First name parts of the heads (no base-model prefix): everything else is the encoder's."""
    names = (*HEAD_NAMES[family.model_type], *DISCRIMINATOR_NAMES.values(), *family.unused)
    return tuple({name.split(".")[0] for name in names})


def normalised(tensors: dict[str, Value], family: Family) -> dict[str, Value]:
    """Legacy `gamma`/`beta` as `weight`/`bias`; the base-model prefix put back on the encoder's
    tensors where a bare model was saved without it."""
    prefix, roots = PREFIXES[family.model_type], their_roots(family)
    renamed: dict[str, Value] = {}
    for name, tensor in tensors.items():
        name = LEGACY_SUFFIXES.sub(
            lambda match: ".weight" if match[1] == "gamma" else ".bias", name
        )
        if not name.startswith(prefix) and name.split(".")[0] not in roots:
            name = prefix + name
        renamed[name] = tensor
    return renamed


def unused(name: str, family: Family) -> bool:
    """Tensors the encoder does not use, passed over without a word: pooler, NSP and SOP
    heads, saved buffers, RoFormer's sinusoid table (ours is computed)."""
    prefix = PREFIXES[family.model_type]
    return (
        name.endswith(BUFFERS)
        or name.startswith((f"{prefix}pooler.", *family.unused))
        or name == POSITION_TABLE
    )


def for_import(tensors: Tensors, family: Family, config: EncoderConfig, where: str) -> Tensors:
    """Their tensors made to fit the shared layouts; only what needs more than a rename."""
    model_type = family.model_type
    if model_type in ("roberta", "xlm-roberta"):
        name = "roberta.embeddings.position_embeddings.weight"
        if name in tensors:
            tensors[name] = tensors[name][position_offset(config.pad_token_id) :]
    elif model_type == "roformer":
        tensors = interleave_rotary_pairs(tensors, config, inverse=True)
    elif model_type == "albert" and not config.factorised_embeddings:
        check_identity_mapping(tensors, config.hidden_size, where)
    elif model_type == "modernbert" and "decoder.bias" not in tensors:
        tensors["decoder.bias"] = torch.zeros(config.vocab_size)  # decoder_bias: false
    return tensors


def check_identity_mapping(tensors: Tensors, hidden: int, where: str) -> None:
    """ALBERT at E == H: ours has no projection, so theirs must be one that changes nothing."""
    weight = tensors.pop(f"{ALBERT_MAPPING}.weight", None)
    bias = tensors.pop(f"{ALBERT_MAPPING}.bias", None)
    if weight is None or bias is None:
        raise CheckpointError(f"{where}: the weights lack {ALBERT_MAPPING}")
    if not (torch.equal(weight, torch.eye(hidden)) and not bias.any()):
        raise CheckpointError(
            f"{where}: {ALBERT_MAPPING} is not the identity while embedding_size == hidden_size; "
            "Cloze's encoder projects embeddings only when they are narrower"
        )


def encoder_for_export(model_type: str, encoder: BertEncoder) -> Tensors:
    """Our encoder under the family's names, transforms applied."""
    config = encoder.config
    if model_type == "albert":
        return albert_body_tensors(encoder)
    if model_type in ("distilbert", "modernbert"):
        return to_theirs(encoder.state_dict(), encoder_layout(model_type, config))
    tensors = bert_body_tensors(encoder, PREFIXES[model_type])
    if model_type == "roformer":
        return {**interleave_rotary_pairs(tensors, config), **position_table(encoder)}
    if model_type in ("roberta", "xlm-roberta"):
        name = "roberta.embeddings.position_embeddings.weight"
        table = tensors[name]
        # The rows before the first position are never read for a real token: zeros, as the
        # padding row of RoBERTa's own checkpoints.
        tensors[name] = torch.cat(
            [table.new_zeros(position_offset(config.pad_token_id), table.shape[1]), table]
        )
    return tensors
