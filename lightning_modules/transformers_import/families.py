"""The `transformers` families Cloze imports: their classes, config keys and the defaults their
config classes give a key that config.json leaves out (config_json.py reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lightning_modules.hf_configs import BERT_KEYS, DISTILBERT_KEYS, MODERNBERT_KEYS, KeyTable
from lightning_modules.transformers_import.errors import CheckpointError

SUPPORTED_MODEL_TYPES = (
    "bert",
    "roberta",
    "xlm-roberta",
    "electra",
    "albert",
    "distilbert",
    "modernbert",
    "roformer",
)

# BertConfig's defaults; the other BERT-like families differ where they say.
BERT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
    "tie_word_embeddings": True,
}


@dataclass(frozen=True)
class Family:
    """One `model_type`: its task classes Cloze reads, its config keys and their defaults."""

    model_type: str
    masked_lm: str  # the masked LM class; what a continued model exports as
    bare: str  # the encoder alone: no head to import
    keys: KeyTable
    defaults: dict[str, Any]
    # Classes with the MLM head beside heads the encoder does not use (NSP, SOP): ignored.
    pretraining: tuple[str, ...] = ()
    discriminator: str | None = None  # ELECTRA's replaced-token detector
    # Their tensors (name prefixes, after the base-model prefix) that no class here needs.
    unused: tuple[str, ...] = ()

    @property
    def architectures(self) -> tuple[str, ...]:
        extra = (self.discriminator,) if self.discriminator else ()
        return (self.masked_lm, *self.pretraining, self.bare, *extra)


def bert_like(model_type: str, prefix: str, **overrides: Any) -> Family:
    defaults = {**BERT_DEFAULTS, **overrides.pop("defaults", {})}
    return Family(
        model_type=model_type,
        masked_lm=f"{prefix}ForMaskedLM",
        bare=f"{prefix}Model",
        keys=BERT_KEYS,
        defaults=defaults,
        **overrides,
    )


FAMILIES = {
    family.model_type: family
    for family in (
        bert_like(
            "bert", "Bert", pretraining=("BertForPreTraining",), unused=("cls.seq_relationship.",)
        ),
        bert_like("roberta", "Roberta", defaults={"vocab_size": 50265, "pad_token_id": 1}),
        bert_like("xlm-roberta", "XLMRoberta", defaults={"pad_token_id": 1}),
        bert_like(
            "electra",
            "Electra",
            discriminator="ElectraForPreTraining",
            defaults={
                "embedding_size": 128,
                "hidden_size": 256,
                "num_attention_heads": 4,
                "intermediate_size": 1024,
            },
        ),
        bert_like(
            "albert",
            "Albert",
            pretraining=("AlbertForPreTraining",),
            unused=("sop_classifier.",),
            defaults={
                "vocab_size": 30000,
                "embedding_size": 128,
                "hidden_size": 4096,
                "num_attention_heads": 64,
                "intermediate_size": 16384,
                "hidden_act": "gelu_new",
                "hidden_dropout_prob": 0.0,
                "attention_probs_dropout_prob": 0.0,
                "num_hidden_groups": 1,
                "inner_group_num": 1,
            },
        ),
        Family(
            "distilbert",
            "DistilBertForMaskedLM",
            "DistilBertModel",
            DISTILBERT_KEYS,
            {
                "vocab_size": 30522,
                "max_position_embeddings": 512,
                "initializer_range": 0.02,
                "pad_token_id": 0,
                "tie_word_embeddings": True,
                "dim": 768,
                "n_layers": 6,
                "n_heads": 12,
                "hidden_dim": 3072,
                "dropout": 0.1,
                "attention_dropout": 0.1,
                "activation": "gelu",
                "sinusoidal_pos_embds": False,
            },
        ),
        Family(
            "modernbert",
            "ModernBertForMaskedLM",
            "ModernBertModel",
            MODERNBERT_KEYS,
            {
                "vocab_size": 50368,
                "hidden_size": 768,
                "intermediate_size": 1152,
                "num_hidden_layers": 22,
                "num_attention_heads": 12,
                "hidden_activation": "gelu",
                "classifier_activation": "gelu",
                "max_position_embeddings": 8192,
                "initializer_range": 0.02,
                "norm_eps": 1e-5,
                "norm_bias": False,
                "pad_token_id": 50283,
                "attention_bias": False,
                "mlp_bias": False,
                "classifier_bias": False,
                "attention_dropout": 0.0,
                "embedding_dropout": 0.0,
                "mlp_dropout": 0.0,
                "local_attention": 128,
                "decoder_bias": True,
                "tie_word_embeddings": True,
                # Before `layer_types` and `rope_parameters`, ModernBERT-base's config said these.
                "global_attn_every_n_layers": 3,
                "global_rope_theta": 160_000.0,
                "local_rope_theta": 10_000.0,
            },
        ),
        bert_like(
            "roformer",
            "RoFormer",
            defaults={"vocab_size": 50000, "max_position_embeddings": 1536, "rotary_value": False},
        ),
    )
}


def family_of(model_type: object, where: str) -> Family:
    if model_type not in FAMILIES:
        raise CheckpointError(
            f"{where}: model_type={model_type!r} is not supported; Cloze imports "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return FAMILIES[str(model_type)]
