"""`trainer.*` and `model.*`: the settings the pretrain and finetune stages train with.

Apart from the Trainer factory (trainer.py), so the CLI validates a config before Lightning is
imported: a bad value fails in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import create_model, model_validator

from flows.core.settings import (
    ConfigError,
    Number,
    Settings,
    bounds,
    dataclass_fields,
    one_of,
    settings_from,
)
from lightning_modules.models.encoder import EncoderConfig
from lightning_modules.optim import OptimizerSettings

PRECISIONS = ("32-true", "bf16-mixed")
# `model.*` keys that shape no weight: a run that continues given weights sets its own.
RUN_CHOICES = ("dropout", "attention_dropout", "document_attention", "initializer_range")
STRATEGIES = ("auto", "ddp", "fsdp")


# The AdamW keys of `trainer.*`, declared (type, default, range) once in `OptimizerSettings`.
OPTIMIZER_KEYS = ("learning_rate", "weight_decay", "warmup_steps", "schedule", "beta2")
if TYPE_CHECKING:
    OptimizerKeys = Settings
else:
    OptimizerKeys = create_model(
        "OptimizerKeys",
        __base__=Settings,
        **dataclass_fields(OptimizerSettings, OPTIMIZER_KEYS),
    )


class TrainerSettings(OptimizerKeys):
    """`trainer.*`: the pretraining recipe and where it runs."""

    section = "trainer"
    max_steps: Annotated[int, bounds(ge=1)] = 1000
    max_tokens: Annotated[int, bounds(ge=1)] | None = None
    batch_size: Annotated[int, bounds(ge=1)] = 32  # the global batch, over devices x num_nodes
    grad_clip: Annotated[Number, bounds(ge=0)] = 1.0
    accumulate_grad_batches: Annotated[int, bounds(ge=1)] = 1
    precision: Annotated[Literal["32-true", "bf16-mixed"], one_of(PRECISIONS)] = "32-true"
    val_every_steps: Annotated[int, bounds(ge=1)] = 200
    max_validation_sequences: Annotated[int, bounds(ge=1)] = 1024
    checkpoint_every_steps: Annotated[int, bounds(ge=1)] = 200
    log_every_steps: Annotated[int, bounds(ge=1)] = 10
    num_workers: Annotated[int, bounds(ge=0)] = 0
    accelerator: str = "cpu"
    devices: Annotated[int, bounds(ge=1)] = 1
    num_nodes: Annotated[int, bounds(ge=1)] = 1
    strategy: Annotated[str, one_of(STRATEGIES)] = "auto"
    threads: Annotated[int, bounds(ge=1)] | None = None
    compile: bool = False
    peak_flops: Annotated[Number, bounds(gt=0)] | None = None

    # Where and how verbosely a run executes does not change the trained weights.
    NOT_IN_KEY: ClassVar[tuple[str, ...]] = (
        "checkpoint_every_steps",
        "log_every_steps",
        "num_workers",
        "accelerator",
        "devices",
        "num_nodes",
        "strategy",
        "threads",
        "compile",
        "peak_flops",
    )

    @model_validator(mode="after")
    def _fits_together(self) -> TrainerSettings:
        warmup_steps = self.optimizer(self.max_steps).warmup_steps
        if self.max_tokens is None and warmup_steps >= self.max_steps:
            raise ConfigError(
                f"trainer.warmup_steps={warmup_steps} must be in "
                f"[0, trainer.max_steps={self.max_steps})"
            )
        self._check_scale_out()
        return self

    def optimizer(self, total_steps: int) -> OptimizerSettings:
        """The AdamW recipe of these settings for a run of `total_steps` steps."""
        return OptimizerSettings(
            **self.model_dump(include=set(OPTIMIZER_KEYS)), total_steps=total_steps
        )

    @property
    def world_size(self) -> int:
        """Training processes in all: `devices` per node times `num_nodes`."""
        return self.devices * self.num_nodes

    def _check_scale_out(self) -> None:
        """`batch_size` is the global batch, so it must split evenly over the processes."""
        world = self.world_size
        if self.batch_size % world:
            raise ConfigError(
                f"trainer.batch_size={self.batch_size} is the global batch and must divide "
                f"evenly over trainer.devices={self.devices} x trainer.num_nodes="
                f"{self.num_nodes} = {world} processes: make it a multiple of {world}"
            )
        if self.strategy == "fsdp" and self.accelerator not in ("gpu", "cuda"):
            raise ConfigError(
                f"trainer.strategy=fsdp needs trainer.accelerator=gpu (Lightning runs FSDP on "
                f"CUDA only; got trainer.accelerator={self.accelerator}): use trainer.strategy=ddp"
            )
        if self.strategy == "fsdp" and self.grad_clip:
            raise ConfigError(
                f"trainer.strategy=fsdp cannot clip gradients by norm in Lightning "
                f"(trainer.grad_clip={self.grad_clip}): set trainer.grad_clip=0 or use "
                "trainer.strategy=ddp"
            )

    def total_steps(self, seq_len: int) -> int:
        """Optimizer steps to train: `max_tokens` (a token budget) wins over `max_steps`."""
        if self.max_tokens is None:
            return self.max_steps
        tokens_per_step = self.batch_size * self.accumulate_grad_batches * seq_len
        steps = -(-self.max_tokens // tokens_per_step)
        warmup_steps = self.optimizer(steps).warmup_steps
        if warmup_steps >= steps:
            raise ConfigError(
                f"trainer.max_tokens={self.max_tokens} gives {steps} steps of {tokens_per_step} "
                f"tokens, not more than trainer.warmup_steps={warmup_steps}"
            )
        return steps


class ModelShape(Settings):
    """Checks a `model.*` section by building the library's `EncoderConfig` from it."""

    section = "model"

    name: str = ""  # a display label, never part of the encoder

    @model_validator(mode="after")
    def _builds(self) -> ModelShape:
        EncoderConfig(**self.model_dump(exclude={"name"}))
        return self


# `model.*` plus what only the tokenizer knows (vocab_size, pad_token_id).
ModelSettings: type[ModelShape] = create_model(  # type: ignore[call-overload]
    "ModelSettings", __base__=ModelShape, **dataclass_fields(EncoderConfig)
)


# Encoder options the key holds only when set off their default: added after keys were pinned
# (an imported checkpoint sets them), so a model that leaves them alone keys as it did before.
OPT_IN_MODEL_FIELDS = ("activation", "tie_word_embeddings")


def model_in_key(model: Mapping[str, Any]) -> dict[str, Any]:
    """`model.*` as an artifact key holds it: every encoder option, validated (so `0` and `0.0`,
    or a default spelled out in a preset and one left out, key the same), without the display
    `name`, and the opt-in options only when set. Renaming a preset moves no key. `vocab_size`
    and `pad_token_id` come in with the tokenizer's key; placeholders stand in for them here
    only to validate the rest."""
    placeholders = {"vocab_size": 1, "pad_token_id": 0}
    settings = settings_from(ModelSettings, {**model, **placeholders}, "model")
    unset = {
        name
        for name in OPT_IN_MODEL_FIELDS
        if getattr(settings, name) == ModelSettings.model_fields[name].default
    }
    return settings.model_dump(exclude={"name", *placeholders, *unset})


def encoder_config(model: Mapping[str, Any], vocab_size: int, pad_token_id: int) -> EncoderConfig:
    """`model.*` (minus its display `name`) plus what only the tokenizer knows."""
    settings = settings_from(
        ModelSettings, {**model, "vocab_size": vocab_size, "pad_token_id": pad_token_id}, "model"
    )
    return EncoderConfig(**settings.model_dump(exclude={"name"}))
