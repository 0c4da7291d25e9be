"""The networks described as plain data: the encoder's shape, ELECTRA's generator, the heads'
choices and the files a saved model is made of.

No torch here: a config is validated with these before any training library is imported, and
a served run's process reads them without waiting for torch (docs/architecture.md). The networks
they describe live beside this module (encoder.py, heads.py, electra.py, serialization.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

# The files a saved model is made of (serialization.py writes and reads them).
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "model_config.json"
ELECTRA_CONFIG_FILE = "electra_config.json"
# The label a head's loss ignores (sub-tokens after a word's first, padding).
IGNORE_INDEX = -100
# How a sequence classifier pools the encoder's output; what a relation classifier reads.
POOLINGS = ("cls", "mean")
RELATION_HEADS = ("entity_start", "cls")

NORM_PLACEMENTS = ("post", "pre")
POSITION_EMBEDDINGS = ("absolute", "rotary")
FEED_FORWARDS = ("gelu", "geglu")
# Our activation names and F.gelu's `approximate` for each: gelu_tanh is `transformers`' gelu_new
# (also its gelu_pytorch_tanh and gelu_fast, the same function), ALBERT's default.
GELU_APPROXIMATIONS = {"gelu": "none", "gelu_tanh": "tanh"}
GLOBAL, LOCAL = "global", "local"


def doc(description: str) -> dict[str, str]:
    """A field's one-line description, as `conf/` and the docs show it (dataclass metadata)."""
    return {"doc": description}


@dataclass(frozen=True)
class EncoderConfig:
    """Shape of the encoder; the field names are the `model.*` config keys users edit, and each
    field's default and description (`doc`) are their one home (flows/training/settings.py
    derives `model.*` from them). The defaults are the small-budget pretraining recipe's."""

    vocab_size: int = field(metadata=doc("Tokens in the vocabulary (the tokenizer's)."))
    hidden_size: int = field(default=128, metadata=doc("Width of every layer."))
    num_layers: int = field(default=2, metadata=doc("Transformer layers."))
    num_heads: int = field(
        default=2, metadata=doc("Attention heads per layer; must divide `hidden_size`.")
    )
    intermediate_size: int = field(
        default=512, metadata=doc("Feed-forward width (per half with GeGLU).")
    )
    max_position_embeddings: int = field(
        default=512,
        metadata=doc(
            "Positions of the learned table (absolute positions), the longest row it can read."
        ),
    )
    type_vocab_size: int = field(
        default=2, metadata=doc("Token-type embeddings (segments A and B); 0: none (ModernBERT).")
    )
    dropout: float = field(
        default=0.0,
        metadata=doc(
            "Dropout on embeddings and sublayer outputs; 0: a short run underfits (BERT's is 0.1)."
        ),
    )
    attention_dropout: float = field(
        default=0.0,
        metadata=doc("Dropout on the attention probabilities; 0, as `dropout` (BERT's is 0.1)."),
    )
    layer_norm_eps: float = field(default=1e-12, metadata=doc("LayerNorm's epsilon."))
    norm_placement: str = field(
        default="post",
        metadata=doc("post: LayerNorm after each residual (BERT); pre: before each sublayer."),
    )
    initializer_range: float = field(
        default=0.02, metadata=doc("Standard deviation of the initial weights.")
    )
    pad_token_id: int = field(default=0, metadata=doc("The padding token's id (the tokenizer's)."))
    embedding_size: int | None = field(
        default=None,
        metadata=doc(
            "ALBERT's factorised embeddings: embed at this width, then project; null: no "
            "projection."
        ),
    )
    share_layers: bool = field(
        default=False,
        metadata=doc(
            "ALBERT's cross-layer sharing: one block's weights applied `num_layers` times."
        ),
    )
    # ModernBERT's options (Warner et al. 2024); each default is BERT's.
    position_embedding: str = field(
        default="absolute",
        metadata=doc("absolute: a learned position table; rotary: RoPE inside attention."),
    )
    rope_theta: float = field(
        default=10_000.0, metadata=doc("RoPE base of the global-attention layers.")
    )
    local_rope_theta: float = field(
        default=10_000.0, metadata=doc("RoPE base of the sliding-window layers.")
    )
    feed_forward: str = field(
        default="gelu",
        metadata=doc("gelu: BERT's feed-forward; geglu: gated, `intermediate_size` per half."),
    )
    linear_bias: bool = field(
        default=True,
        metadata=doc("Biases in the attention, feed-forward and MLM-transform linears."),
    )
    norm_bias: bool = field(default=True, metadata=doc("Shifts in the LayerNorms."))
    first_attention_norm: bool = field(
        default=True,
        metadata=doc(
            "false: layer 0 reads the embedding norm's output as it is (pre-LN only; ModernBERT)."
        ),
    )
    global_attention_every: int = field(
        default=1,
        metadata=doc(
            "Layer i attends globally when i % n == 0, else in a sliding window (1: all global)."
        ),
    )
    local_attention: int = field(
        default=128,
        metadata=doc("The sliding window's width: `local_attention` // 2 tokens each side."),
    )
    document_attention: bool = field(
        default=False,
        metadata=doc(
            "Packed rows: each token attends only within its own document (between [SEP]s)."
        ),
    )
    activation: str = field(
        default="gelu",
        metadata=doc(
            "gelu (erf, BERT's) or gelu_tanh (transformers' gelu_new, ALBERT's); keyed only "
            "when set."
        ),
    )
    tie_word_embeddings: bool = field(
        default=True,
        metadata=doc(
            "false: the MLM decoder has its own weight (an untied checkpoint); keyed only when set."
        ),
    )

    def __post_init__(self) -> None:
        for key in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "max_position_embeddings",
            "global_attention_every",
            "local_attention",
        ):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"model.{key}={value!r} must be a positive integer")
        if not isinstance(self.type_vocab_size, int) or self.type_vocab_size < 0:
            raise ValueError(
                f"model.type_vocab_size={self.type_vocab_size!r} must be a non-negative integer "
                "(0: no token-type embeddings, as ModernBERT)"
            )
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.hidden_size={self.hidden_size} is not divisible by "
                f"model.num_heads={self.num_heads}; pick a head count that divides it"
            )
        for key in ("dropout", "attention_dropout"):
            value = getattr(self, key)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"model.{key}={value!r} must be in [0, 1)")
        if self.norm_placement not in NORM_PLACEMENTS:
            raise ValueError(
                f"model.norm_placement={self.norm_placement!r} must be one of {NORM_PLACEMENTS}"
            )
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"pad_token_id={self.pad_token_id} is outside the vocabulary")
        if self.embedding_size is not None and (
            not isinstance(self.embedding_size, int) or self.embedding_size < 1
        ):
            raise ValueError(
                f"model.embedding_size={self.embedding_size!r} must be a positive integer, "
                "or null to embed at model.hidden_size"
            )
        for key in (
            "share_layers",
            "linear_bias",
            "norm_bias",
            "first_attention_norm",
            "tie_word_embeddings",
        ):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"model.{key}={getattr(self, key)!r} must be true or false")
        self._check_modern_options()

    def _check_modern_options(self) -> None:
        for key, choices in (
            ("position_embedding", POSITION_EMBEDDINGS),
            ("feed_forward", FEED_FORWARDS),
            ("activation", tuple(GELU_APPROXIMATIONS)),
        ):
            if getattr(self, key) not in choices:
                raise ValueError(f"model.{key}={getattr(self, key)!r} must be one of {choices}")
        for key in ("rope_theta", "local_rope_theta"):
            if not getattr(self, key) > 0:
                raise ValueError(f"model.{key}={getattr(self, key)!r} must be positive")
        if self.position_embedding == "rotary" and (self.hidden_size // self.num_heads) % 2:
            raise ValueError(
                f"model.position_embedding=rotary needs an even head size; model.hidden_size="
                f"{self.hidden_size} / model.num_heads={self.num_heads} is odd"
            )
        if not self.first_attention_norm and (self.norm_placement != "pre" or self.share_layers):
            raise ValueError(
                "model.first_attention_norm=false needs model.norm_placement=pre and "
                "model.share_layers=false (only a pre-LN first layer can reuse the embedding norm)"
            )

    @property
    def embedding_width(self) -> int:
        return self.hidden_size if self.embedding_size is None else self.embedding_size

    @property
    def factorised_embeddings(self) -> bool:
        """True when embeddings need a projection to the hidden size (E != H)."""
        return self.embedding_width != self.hidden_size

    def layer_kind(self, index: int) -> str:
        """GLOBAL or LOCAL: ModernBERT's alternation, a global layer every n-th from layer 0."""
        return GLOBAL if index % self.global_attention_every == 0 else LOCAL

    @property
    def gelu_approximate(self) -> str:
        """F.gelu's `approximate` argument for `activation`."""
        return GELU_APPROXIMATIONS[self.activation]

    @property
    def has_local_layers(self) -> bool:
        return self.global_attention_every > 1 and self.num_layers > 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ElectraConfig:
    """The `objective.*` keys of replaced-token detection; the discriminator's shape is `model.*`.

    The paper's best generators are 1/4 to 1/2 of the discriminator's width: a stronger
    generator makes the task too hard for the discriminator to learn from early on.
    """

    generator_size_fraction: float = field(
        default=0.25,
        metadata=doc("electra: the generator's width as a fraction of the discriminator's."),
    )
    generator_hidden_size: int | None = field(
        default=None, metadata=doc("electra: or the generator's width itself.")
    )
    discriminator_weight: float = field(
        default=50.0,
        metadata=doc("electra: loss = generator MLM loss + this x discriminator loss."),
    )

    def __post_init__(self) -> None:
        if not 0.0 < self.generator_size_fraction <= 1.0:
            raise ValueError(
                f"objective.generator_size_fraction={self.generator_size_fraction!r} "
                "must be in (0, 1]"
            )
        hidden = self.generator_hidden_size
        if hidden is not None and (not isinstance(hidden, int) or hidden < 1):
            raise ValueError(
                f"objective.generator_hidden_size={hidden!r} must be a positive integer, "
                "or null to use objective.generator_size_fraction"
            )
        if not self.discriminator_weight > 0.0:
            raise ValueError(
                f"objective.discriminator_weight={self.discriminator_weight!r} must be positive"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def generator_config(discriminator: EncoderConfig, electra: ElectraConfig) -> EncoderConfig:
    """The discriminator's shape, narrowed: same depth, head size and embedding width.

    Keeping the head size fixes the head count (the paper's generators: 256 wide with 4 heads
    beside a 768-wide base); the feed-forward width shrinks in proportion.
    """
    head_size = discriminator.hidden_size // discriminator.num_heads
    hidden = electra.generator_hidden_size
    if hidden is None:
        heads = max(1, round(electra.generator_size_fraction * discriminator.num_heads))
        hidden = heads * head_size
    elif hidden % head_size:
        raise ValueError(
            f"objective.generator_hidden_size={hidden} must be a multiple of the discriminator's "
            f"head size {head_size} (model.hidden_size / model.num_heads)"
        )
    return replace(
        discriminator,
        hidden_size=hidden,
        num_heads=hidden // head_size,
        intermediate_size=max(
            1, discriminator.intermediate_size * hidden // discriminator.hidden_size
        ),
        embedding_size=discriminator.embedding_width,
    )


def load_encoder_config(directory: Path) -> EncoderConfig:
    """The encoder config a saved model records in `CONFIG_FILE`."""
    return EncoderConfig(**json.loads((directory / CONFIG_FILE).read_text()))
