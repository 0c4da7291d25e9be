"""config.json to our `EncoderConfig` and back, per family (`encoder_settings` reads,
`hf_settings` writes).

Each family reads its keys through the shared tables of hf_configs.py (the ones export writes
with); what a family fixes or spells its own way is its entry in `ADJUSTMENTS`. A key config.json
leaves out means the `transformers` class's default (families.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lightning_modules.export_modernbert import modernbert_layer_fields
from lightning_modules.export_roformer import ROPE_THETA
from lightning_modules.hf_configs import ACTIVATIONS_READ, hf_values
from lightning_modules.models.config import GLOBAL, EncoderConfig
from lightning_modules.transformers_import.errors import CheckpointError
from lightning_modules.transformers_import.families import FAMILIES, Family

Options = dict[str, Any]


def setting(hf: dict[str, Any], key: str, family: Family, where: str) -> Any:
    """`hf[key]`, or the family class's default when config.json leaves it out."""
    if key in hf:
        return hf[key]
    if key in family.defaults:
        return family.defaults[key]
    raise CheckpointError(f"{where} has no {key!r}: add it as the checkpoint was trained")


def read_table(hf: dict[str, Any], family: Family, where: str) -> dict[str, Any]:
    """Our options from the family's key table; keys one option maps to must agree."""
    values: dict[str, Any] = {}
    for ours, keys in family.keys.items():
        found = {key: setting(hf, key, family, where) for key in keys}
        if ours == "activation":
            found = {key: activation(key, value, where) for key, value in found.items()}
        if len(set(found.values())) > 1:
            spelled = ", ".join(f"{key}={value!r}" for key, value in found.items())
            raise CheckpointError(f"{where}: {spelled} differ; Cloze's encoder has one {ours}")
        values[ours] = next(iter(found.values()))
    if values["pad_token_id"] is None:
        raise CheckpointError(f"{where}: pad_token_id is null; set the tokenizer's padding id")
    return values


def activation(key: str, value: Any, where: str) -> str:
    if value not in ACTIVATIONS_READ:
        raise CheckpointError(
            f"{where}: {key}={value!r} is not an activation Cloze's encoder has; it has "
            f"{', '.join(ACTIVATIONS_READ)}"
        )
    return ACTIVATIONS_READ[value]


def encoder_settings(
    family: Family, hf: dict[str, Any], architecture: str, where: str
) -> EncoderConfig:
    """The `EncoderConfig` of the encoder this config.json describes; what it cannot represent
    is a CheckpointError naming the key and its value."""
    values = read_table(hf, family, where)
    values.update(ADJUSTMENTS[family.model_type].read(hf, values, architecture, where))
    try:
        return EncoderConfig(**values)
    except ValueError as error:
        raise CheckpointError(f"{where}: {error}") from None


def hf_settings(family: Family, config: EncoderConfig) -> dict[str, Any]:
    """The config.json entries that say `config` in this family (the inverse of the above)."""
    return {**hf_values(config, family.keys), **ADJUSTMENTS[family.model_type].write(config)}


def refuse(where: str, hf: dict[str, Any], key: str, allowed: tuple[Any, ...], why: str) -> None:
    """A CheckpointError unless config.json's `key` (or its default) is one of `allowed`."""
    value = hf.get(key, allowed[0])
    if value not in allowed:
        raise CheckpointError(f"{where}: {key}={value!r} is not supported: {why}")


def erf_gelu_only(hf: dict[str, Any], values: Options, where: str, why: str) -> None:
    """Where a family's head ignores `hidden_act`: one activation serves both only if erf gelu."""
    if values["activation"] != "gelu":
        raise CheckpointError(
            f"{where}: hidden_act={hf.get('hidden_act')!r} is not supported: {why}, and Cloze's "
            "encoder has one activation"
        )


def embedding_size(hf: dict[str, Any], values: dict[str, Any], family: Family) -> int | None:
    """The factorised embedding width, None at the hidden size (no projection)."""
    width = hf.get("embedding_size") or family.defaults.get("embedding_size")
    return None if width in (None, values["hidden_size"]) else width


@dataclass(frozen=True)
class Adjustment:
    """What a family fixes or spells its own way: read(config.json, the table's values,
    architecture, where) -> our options; write(our config) -> config.json entries."""

    read: Callable[[dict[str, Any], Options, str, str], Options]
    write: Callable[[EncoderConfig], dict[str, Any]]


def read_bert(hf: dict[str, Any], values: Options, architecture: str, where: str) -> Options:
    refuse(where, hf, "position_embedding_type", ("absolute",), "Cloze's positions are absolute")
    refuse(where, hf, "is_decoder", (False,), "Cloze's encoder attends both ways")
    return {}


def read_roberta(hf: dict[str, Any], values: Options, architecture: str, where: str) -> Options:
    """Positions start after the padding id: rows 0 .. pad are never read for a real token."""
    read_bert(hf, values, architecture, where)
    erf_gelu_only(hf, values, where, "RoBERTa's MLM head applies erf gelu whatever hidden_act says")
    offset = position_offset(values["pad_token_id"])
    return {"max_position_embeddings": values["max_position_embeddings"] - offset}


def position_offset(pad_token_id: int) -> int:
    """RoBERTa's first position id: the one after the padding id."""
    return pad_token_id + 1


def write_roberta(config: EncoderConfig) -> dict[str, Any]:
    offset = position_offset(config.pad_token_id)
    return {"max_position_embeddings": config.max_position_embeddings + offset}


def read_electra(hf: dict[str, Any], values: Options, architecture: str, where: str) -> Options:
    read_bert(hf, values, architecture, where)
    if architecture == "ElectraForMaskedLM":
        erf_gelu_only(hf, values, where, "ELECTRA's generator head applies erf gelu")
    return {"embedding_size": embedding_size(hf, values, FAMILIES["electra"])}


def write_embedding_size(config: EncoderConfig) -> dict[str, Any]:
    return {"embedding_size": config.embedding_width}


def read_albert(hf: dict[str, Any], values: Options, architecture: str, where: str) -> Options:
    read_bert(hf, values, architecture, where)
    one_block = "Cloze shares one block across layers (one group of one layer)"
    refuse(where, hf, "num_hidden_groups", (1,), one_block)
    refuse(where, hf, "inner_group_num", (1,), one_block)
    return {"share_layers": True, "embedding_size": embedding_size(hf, values, FAMILIES["albert"])}


def read_distilbert(hf: dict[str, Any], values: Options, architecture: str, where: str) -> Options:
    """No token types; DistilBERT's norms have epsilon 1e-12 whatever the config says. A
    sinusoidal table is in the weights like a learned one (and stays in config.json)."""
    return {"type_vocab_size": 0, "layer_norm_eps": 1e-12}


def read_modernbert(hf: dict[str, Any], values: Options, architecture: str, where: str) -> Options:
    """Rotary, GeGLU, pre-LN without layer 0's attention norm, no token types; which layers
    attend in a window and each kind's RoPE base."""
    every = global_attention_every(hf, values["num_layers"], where)
    full, local = rope_thetas(hf, where)
    return {
        "position_embedding": "rotary",
        "feed_forward": "geglu",
        "norm_placement": "pre",
        "first_attention_norm": False,
        "type_vocab_size": 0,
        "global_attention_every": every,
        "rope_theta": full,
        "local_rope_theta": local,
    }


def global_attention_every(hf: dict[str, Any], layers: int, where: str) -> int:
    """Ours is `i % n == 0` for global layers: the n that gives config.json's layer types."""
    if "layer_types" in hf:
        types = list(hf["layer_types"])
    else:
        n = int(setting(hf, "global_attn_every_n_layers", FAMILIES["modernbert"], where))
        types = ["sliding_attention" if i % n else "full_attention" for i in range(layers)]
    full = [index for index, kind in enumerate(types) if kind == "full_attention"]
    every = full[1] if len(full) > 1 else layers
    expected = [GLOBAL if index % every == 0 else "local" for index in range(layers)]
    if (
        len(types) != layers
        or [GLOBAL if kind == "full_attention" else "local" for kind in types] != expected
    ):
        raise CheckpointError(
            f"{where}: layer_types={types} is not supported: Cloze attends globally in every n-th "
            "layer from layer 0 and in a sliding window in the others"
        )
    return every


def rope_thetas(hf: dict[str, Any], where: str) -> tuple[float, float]:
    if hf.get("rope_scaling"):
        raise CheckpointError(f"{where}: rope_scaling={hf['rope_scaling']!r} is not supported")
    family = FAMILIES["modernbert"]
    parameters = hf.get("rope_parameters") or {}
    thetas = []
    kinds = (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta"))
    for kind, old_key in kinds:
        rope = parameters.get(kind) or {}
        if rope.get("rope_type", "default") != "default":
            raise CheckpointError(
                f"{where}: rope_parameters.{kind}.rope_type={rope['rope_type']!r} is not "
                "supported; Cloze's RoPE is the default (unscaled) one"
            )
        thetas.append(float(rope.get("rope_theta", setting(hf, old_key, family, where))))
    return thetas[0], thetas[1]


def write_modernbert(config: EncoderConfig) -> dict[str, Any]:
    """Layer types and RoPE bases in the current spelling; an output bias (ours always has one,
    zero where the checkpoint had none)."""
    return {**modernbert_layer_fields(config), "decoder_bias": True}


def read_roformer(hf: dict[str, Any], values: Options, architecture: str, where: str) -> Options:
    read_bert(hf, values, architecture, where)
    refuse(where, hf, "rotary_value", (False,), "Cloze rotates queries and keys, not values")
    return {
        "position_embedding": "rotary",
        "rope_theta": ROPE_THETA,
        "embedding_size": embedding_size(hf, values, FAMILIES["roformer"]),
    }


def no_entries(config: EncoderConfig) -> dict[str, Any]:
    return {}


ADJUSTMENTS = {
    "bert": Adjustment(read_bert, no_entries),
    "roberta": Adjustment(read_roberta, write_roberta),
    "xlm-roberta": Adjustment(read_roberta, write_roberta),
    "electra": Adjustment(read_electra, write_embedding_size),
    "albert": Adjustment(read_albert, write_embedding_size),
    "distilbert": Adjustment(read_distilbert, no_entries),
    "modernbert": Adjustment(read_modernbert, write_modernbert),
    "roformer": Adjustment(read_roformer, write_embedding_size),
}
