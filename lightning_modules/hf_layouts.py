"""Where each of our tensors lives in each `transformers` class: one name map per family, read in
both directions (export.py writes a checkpoint with it, transformers_import reads one).

A layout lists `(our name, their names)`: one name, or several when our tensor is theirs
concatenated along dim 0 (our fused QKV projection against three linears). Our names are relative
to the module a layout describes (a `BertEncoder`, a `MaskedLMHead`, a `ReplacedTokenHead`); their
names carry the base-model prefix (`bert.`, `model.` for ModernBERT) where the class has one.
Transforms beyond renaming (RoFormer's rotary pair order, RoBERTa's position offset, ALBERT's
mapping at equal widths) live with their families, on the tensors under their names.
"""

from __future__ import annotations

import torch
from torch import nn

from lightning_modules.models.config import EncoderConfig

Layout = list[tuple[str, tuple[str, ...]]]
Tensors = dict[str, torch.Tensor]

# The base model's attribute in each family's task classes (`base_model_prefix`).
PREFIXES = {
    "bert": "bert.",
    "roberta": "roberta.",
    "xlm-roberta": "roberta.",
    "electra": "electra.",
    "albert": "albert.",
    "distilbert": "distilbert.",
    "modernbert": "model.",
    "roformer": "roformer.",
}

# Our block's parts (rows) and each family's name for them (columns).
BLOCK_NAMES_TABLE = """
ours                bert                        albert                 distilbert         modernbert
attention.out       attention.output.dense      attention.dense        attention.out_lin  attn.Wo
attention_norm      attention.output.LayerNorm  attention.LayerNorm    sa_layer_norm      attn_norm
feed_forward.up     intermediate.dense          ffn                    ffn.lin1           mlp.Wi
feed_forward.down   output.dense                ffn_output             ffn.lin2           mlp.Wo
feed_forward_norm   output.LayerNorm            full_layer_layer_norm  output_layer_norm  mlp_norm
"""


def block_names(family: str) -> dict[str, str]:
    """One column of BLOCK_NAMES_TABLE: our part -> the family's name (BERT's is also
    RoBERTa's, ELECTRA's and RoFormer's)."""
    header, *rows = (line.split() for line in BLOCK_NAMES_TABLE.strip().splitlines())
    column = header.index(family)
    return {row[0]: row[column] for row in rows}


BERT_LAYER_NAMES = block_names("bert")
ALBERT_LAYER_NAMES = block_names("albert")
DISTILBERT_LAYER_NAMES = block_names("distilbert")
# ModernBERT fuses QKV as we do, in the same (3, heads, head_dim) order: one name.
MODERNBERT_LAYER_NAMES = {"attention.qkv": "attn.Wqkv", **block_names("modernbert")}
# The others' three projections, stacked into our one.
BERT_QKV = ("attention.self.query", "attention.self.key", "attention.self.value")
ALBERT_QKV = ("attention.query", "attention.key", "attention.value")
DISTILBERT_QKV = ("attention.q_lin", "attention.k_lin", "attention.v_lin")
ALBERT_LAYER = "albert.encoder.albert_layer_groups.0.albert_layers.0."
ALBERT_MAPPING = "albert.encoder.embedding_hidden_mapping_in"

# Each masked LM's head: transform, its norm, the output bias, the decoder (tied or not). The
# decoder's own bias (`<decoder>.bias`) is the output bias again where it is not the bias itself.
HEAD_NAMES = {
    "bert": (
        "cls.predictions.transform.dense",
        "cls.predictions.transform.LayerNorm",
        "cls.predictions.bias",
        "cls.predictions.decoder",
    ),
    "roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias", "lm_head.decoder"),
    "electra": (
        "generator_predictions.dense",
        "generator_predictions.LayerNorm",
        "generator_lm_head.bias",
        "generator_lm_head",
    ),
    "albert": (
        "predictions.dense",
        "predictions.LayerNorm",
        "predictions.bias",
        "predictions.decoder",
    ),
    "distilbert": (
        "vocab_transform",
        "vocab_layer_norm",
        "vocab_projector.bias",
        "vocab_projector",
    ),
    "modernbert": ("head.dense", "head.norm", "decoder.bias", "decoder"),
}
HEAD_NAMES["xlm-roberta"] = HEAD_NAMES["roberta"]
HEAD_NAMES["roformer"] = HEAD_NAMES["bert"]
DISCRIMINATOR_NAMES = {
    "dense": "discriminator_predictions.dense",
    "prediction": "discriminator_predictions.dense_prediction",
}


def affine(ours: str, theirs: str, bias: bool) -> Layout:
    """A linear or a norm: its weight, and its bias when it has one."""
    kinds = ("weight", "bias") if bias else ("weight",)
    return [(f"{ours}.{kind}", (f"{theirs}.{kind}",)) for kind in kinds]


def embeddings_layout(config: EncoderConfig, prefix: str, word: str, norm: str) -> Layout:
    """The word table, the learned position and token-type tables where the model has them,
    and the embedding norm."""
    layout: Layout = [("embeddings.word.weight", (f"{prefix}{word}.weight",))]
    if config.position_embedding == "absolute":
        layout.append(("embeddings.position.weight", (f"{prefix}position_embeddings.weight",)))
    if config.type_vocab_size:
        layout.append(("embeddings.token_type.weight", (f"{prefix}token_type_embeddings.weight",)))
    return layout + affine("embeddings.norm", f"{prefix}{norm}", config.norm_bias)


def layer_layout(
    config: EncoderConfig,
    ours: str,
    theirs: str,
    names: dict[str, str],
    qkv: tuple[str, ...] = (),
    attention_norm: bool = True,
) -> Layout:
    """One block; our fused QKV projection is their three linears stacked (`qkv`), or one fused
    linear of theirs too (named in `names`). Without `attention_norm` (ModernBERT's layer 0) the
    block has none."""
    layout: Layout = []
    kinds = ("weight", "bias") if config.linear_bias else ("weight",)
    if qkv:
        for kind in kinds:
            parts = tuple(f"{theirs}{part}.{kind}" for part in qkv)
            layout.append((f"{ours}attention.qkv.{kind}", parts))
    for module, name in names.items():
        if module == "attention_norm" and not attention_norm:
            continue
        bias = config.norm_bias if module.endswith("norm") else config.linear_bias
        layout += affine(ours + module, theirs + name, bias)
    return layout


def layers_layout(
    config: EncoderConfig, theirs: str, names: dict[str, str], qkv: tuple[str, ...] = ()
) -> Layout:
    """Every layer, shared layers unrolled (each of their layers reads our one block)."""
    unique = 1 if config.share_layers else config.num_layers
    layout: Layout = []
    for index in range(config.num_layers):
        norm = index > 0 or config.first_attention_norm
        ours, at = f"layers.{index % unique}.", f"{theirs}{index}."
        layout += layer_layout(config, ours, at, names, qkv, norm)
    return layout


def bert_encoder_layout(config: EncoderConfig, prefix: str) -> Layout:
    """BERT's layout, also RoBERTa's, ELECTRA's and RoFormer's (their factorised embeddings
    project through `embeddings_project`)."""
    layout = embeddings_layout(config, f"{prefix}embeddings.", "word_embeddings", "LayerNorm")
    if config.factorised_embeddings:
        layout += affine("embedding_projection", f"{prefix}embeddings_project", True)
    return layout + layers_layout(config, f"{prefix}encoder.layer.", BERT_LAYER_NAMES, BERT_QKV)


def albert_encoder_layout(config: EncoderConfig) -> Layout:
    """ALBERT with one layer group of one layer: our single shared block. Its E -> H mapping
    exists at equal widths too, where ours is the identity (the family handles that case)."""
    layout = embeddings_layout(config, "albert.embeddings.", "word_embeddings", "LayerNorm")
    if config.factorised_embeddings:
        layout += affine("embedding_projection", ALBERT_MAPPING, True)
    return layout + layer_layout(config, "layers.0.", ALBERT_LAYER, ALBERT_LAYER_NAMES, ALBERT_QKV)


def distilbert_encoder_layout(config: EncoderConfig) -> Layout:
    layout = embeddings_layout(config, "distilbert.embeddings.", "word_embeddings", "LayerNorm")
    theirs = "distilbert.transformer.layer."
    return layout + layers_layout(config, theirs, DISTILBERT_LAYER_NAMES, DISTILBERT_QKV)


def modernbert_encoder_layout(config: EncoderConfig) -> Layout:
    """No position or token-type table; layer 0 reads the embedding norm (no attention norm);
    a final norm."""
    layout = embeddings_layout(config, "model.embeddings.", "tok_embeddings", "norm")
    layout += layers_layout(config, "model.layers.", MODERNBERT_LAYER_NAMES)
    return layout + affine("final_norm", "model.final_norm", config.norm_bias)


def encoder_layout(model_type: str, config: EncoderConfig) -> Layout:
    """A family's encoder under the names of its task classes (prefix included)."""
    if model_type == "albert":
        return albert_encoder_layout(config)
    if model_type == "distilbert":
        return distilbert_encoder_layout(config)
    if model_type == "modernbert":
        return modernbert_encoder_layout(config)
    return bert_encoder_layout(config, PREFIXES[model_type])


def head_layout(model_type: str, config: EncoderConfig) -> Layout:
    """The family's MLM head; the decoder weight only when untied (else it is the word table)."""
    transform, norm, bias, decoder = HEAD_NAMES[model_type]
    layout = affine("transform", transform, config.linear_bias)
    layout += affine("norm", norm, config.norm_bias)
    layout.append(("bias", (bias,)))
    if not config.tie_word_embeddings:
        layout.append(("word_embeddings.weight", (f"{decoder}.weight",)))
    return layout


def discriminator_layout() -> Layout:
    """ELECTRA's replaced-token head (`ElectraForPreTraining`)."""
    return [
        entry
        for ours, theirs in DISCRIMINATOR_NAMES.items()
        for entry in affine(ours, theirs, bias=True)
    ]


def head_tensors(head: nn.Module, model_type: str, config: EncoderConfig) -> Tensors:
    """A `MaskedLMHead` under the family's names; a tied decoder weight is left out
    (`transformers` re-ties it). Untied, `transformers` ties neither the decoder's weight nor its
    bias: the bias goes under both names, so the one its decoder adds is ours."""
    tensors = to_theirs(head.state_dict(), head_layout(model_type, config))
    bias, decoder = HEAD_NAMES[model_type][2:]
    if not config.tie_word_embeddings:
        tensors[f"{decoder}.bias"] = tensors[bias].clone()
    return tensors


def to_theirs(state: Tensors, layout: Layout) -> Tensors:
    """Our tensors under their names: independent contiguous copies (safetensors refuses
    tensors that share memory), fused ones split."""
    tensors: Tensors = {}
    for ours, theirs in layout:
        for name, part in zip(theirs, state[ours].detach().chunk(len(theirs)), strict=True):
            tensors[name] = part.clone().contiguous()
    return tensors


def to_ours(tensors: Tensors, layout: Layout) -> tuple[Tensors, list[str]]:
    """Their tensors under our names, fused ones concatenated; and their names that are missing."""
    state: Tensors = {}
    missing: list[str] = []
    for ours, theirs in layout:
        absent = [name for name in theirs if name not in tensors]
        if absent:
            missing += absent
        elif len(theirs) == 1:
            state[ours] = tensors[theirs[0]]
        else:
            state[ours] = torch.cat([tensors[name] for name in theirs])
    return state, missing
