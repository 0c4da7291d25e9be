"""`trainer.*` and `model.*`: the settings the pretrain and finetune stages train with.

Apart from the Trainer factory (trainer.py), so the CLI validates a config before Lightning is
imported: a bad value fails in seconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import model_validator

from flows.core.keys import opt_ins_at_default
from flows.core.settings import (
    ConfigError,
    Number,
    bounds,
    one_of,
    output_settings,
    settings_from,
    settings_of,
)
from flows.training.precision_choice import refuse_fp16_off_cuda
from lightning_modules.models.config import EncoderConfig
from lightning_modules.optim_settings import OptimizerSettings

PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed")
Precision = Literal["auto", "32-true", "bf16-mixed", "16-mixed"]
# `model.*` keys that shape no weight: a run that continues given weights sets its own.
RUN_CHOICES = ("dropout", "attention_dropout", "document_attention", "initializer_range")
STRATEGIES = ("auto", "ddp", "fsdp")


# The AdamW keys of `trainer.*`: `OptimizerSettings`' fields, declared there (their one home).
OPTIMIZER_KEYS = ("learning_rate", "weight_decay", "warmup_steps", "schedule", "beta2")


class TrainerSettings(settings_of(OptimizerSettings, OPTIMIZER_KEYS)):  # type: ignore[misc]
    """`trainer.*`: the pretraining recipe (AdamW's keys are `OptimizerSettings`') and where it
    runs."""

    section = "trainer"
    warmup_ratio: Annotated[Number, bounds(ge=0, lt=1)] | None = None
    """When set, the warmup is this share of the steps and `warmup_steps` is ignored."""
    max_steps: Annotated[int, bounds(ge=1)] = 2000
    """Optimizer steps (x batch 32 x 128 tokens = 8.2 M tokens: the demo's lift in fp32 in time)."""
    max_tokens: Annotated[int, bounds(ge=1)] | None = None
    """A token budget; when set it decides the step count instead of `max_steps`."""
    batch_size: Annotated[int, bounds(ge=1)] = 32
    """The GLOBAL batch in sequences, split evenly over devices x num_nodes processes."""
    grad_clip: Annotated[Number, bounds(ge=0)] = 1.0
    """Gradient norm clipping; 0: none."""
    accumulate_grad_batches: Annotated[int, bounds(ge=1)] = 1
    """Batches whose gradients add up to one optimizer step."""
    precision: Annotated[Precision, one_of(PRECISIONS)] = "auto"
    """auto (bf16 where native, else CPU 32-true, GPU 16-mixed) | 32-true | bf16-mixed | 16-mixed"""
    val_every_steps: Annotated[int, bounds(ge=1)] = 250
    """Steps between validations (MLM loss on a fixed, seeded mask)."""
    max_validation_sequences: Annotated[int, bounds(ge=1)] = 512
    """Validation sequences read at most, each time."""
    checkpoint_every_steps: Annotated[int, bounds(ge=1)] = 250
    """Steps between resumable checkpoints (out of the key)."""
    log_every_steps: Annotated[int, bounds(ge=1)] = 50
    """Steps between logged training metrics (out of the key)."""
    num_workers: Annotated[int, bounds(ge=0)] = 0
    """DataLoader worker processes (out of the key)."""
    accelerator: str = "cpu"
    """Lightning's accelerator: cpu | gpu | auto (out of the key)."""
    devices: Annotated[int, bounds(ge=1)] = 1
    """Processes per node; above 1, `python -m flows` spawns them on one node (out of the key)."""
    num_nodes: Annotated[int, bounds(ge=1)] = 1
    """Above 1: start flows.orchestration.rank_entry per rank (torchrun, srun; out of the key)."""
    strategy: Annotated[str, one_of(STRATEGIES)] = "auto"
    """auto (ddp above one process) | ddp | fsdp (needs grad_clip 0; out of the key)."""
    threads: Annotated[int, bounds(ge=1)] | None = None
    """torch intra-op threads; null: torch's default (out of the key)."""
    compile: bool = False
    """torch.compile the encoder (measure before enabling; out of the key)."""
    peak_flops: Annotated[Number, bounds(gt=0)] | None = None
    """The device's peak FLOP/s; when set, train/mfu is logged beside train/model_tflops."""

    # Keyed only when set: added after keys were pinned (a continued checkpoint sets them).
    OPT_IN: ClassVar[tuple[str, ...]] = ("warmup_ratio",)
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
        if self.accelerator == "cpu":  # known before any hardware is detected
            refuse_fp16_off_cuda(self.precision, "cpu", "trainer.accelerator=cpu")
        return self

    def optimizer(self, total_steps: int, head_only_steps: int = 0) -> OptimizerSettings:
        """The AdamW recipe of these settings for a run of `total_steps` steps, the first
        `head_only_steps` of which train a new MLM head alone (the warmup follows them)."""
        values = self.model_dump(include=set(OPTIMIZER_KEYS))
        if self.warmup_ratio is not None:
            values["warmup_steps"] = round(self.warmup_ratio * (total_steps - head_only_steps))
        return OptimizerSettings(**values, total_steps=total_steps, head_only_steps=head_only_steps)

    def in_key(self) -> dict[str, Any]:
        """The fields that change the trained weights, opt-in ones only when set."""
        return output_settings(self, (*self.NOT_IN_KEY, *opt_ins_at_default(self, self.OPT_IN)))

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


# What the tokenizer supplies to `EncoderConfig`: arguments of `ModelSettings.encoder`, never
# `model.*` keys.
FROM_THE_TOKENIZER = ("vocab_size", "pad_token_id")
MODEL_KEYS = tuple(
    field.name
    for field in dataclasses.fields(EncoderConfig)
    if field.name not in FROM_THE_TOKENIZER
)


class ModelSettings(settings_of(EncoderConfig, MODEL_KEYS)):  # type: ignore[misc]
    """`model.*`: the encoder's shape and regularisation, `EncoderConfig`'s fields (their one
    home) but for what only the tokenizer knows, plus a display `name`; the library's own checks
    validate them."""

    section = "model"

    name: str = ""
    """A display label (the preset's name), never part of the encoder or its key."""

    @model_validator(mode="after")
    def _builds(self) -> ModelSettings:
        # The library's checks, with stand-ins for what the tokenizer supplies.
        self.encoder(vocab_size=1, pad_token_id=0)
        return self

    def encoder(self, vocab_size: int, pad_token_id: int) -> EncoderConfig:
        """The library's `EncoderConfig` of these settings and the tokenizer's vocabulary."""
        return EncoderConfig(
            vocab_size=vocab_size,
            pad_token_id=pad_token_id,
            **self.model_dump(exclude={"name"}),
        )


# Encoder options the key holds only when set off their default: added after keys were pinned
# (an imported checkpoint sets them), so a model that leaves them alone keys as it did before.
OPT_IN_MODEL_FIELDS = ("activation", "tie_word_embeddings")


def model_settings(model: ModelSettings | Mapping[str, Any]) -> ModelSettings:
    """The run's typed `model.*` as is; a mapping (a library caller's, a test's) validated."""
    return (
        model if isinstance(model, ModelSettings) else settings_from(ModelSettings, model, "model")
    )


def model_in_key(model: ModelSettings | Mapping[str, Any]) -> dict[str, Any]:
    """`model.*` as an artifact key holds it: every encoder option, validated (so `0` and `0.0`,
    or a default spelled out in a preset and one left out, key the same), without the display
    `name`, and the opt-in options only when set. Renaming a preset moves no key. `vocab_size`
    and `pad_token_id` come in with the tokenizer's key."""
    settings = model_settings(model)
    keyed = settings.model_dump(
        exclude={"name", *opt_ins_at_default(settings, OPT_IN_MODEL_FIELDS)}
    )
    # `Number` keeps `0` as given; a float option keys as a float, as this docstring promises
    return {
        name: float(value) if ModelSettings.model_fields[name].annotation is float else value
        for name, value in keyed.items()
    }


def encoder_config(
    model: ModelSettings | Mapping[str, Any], vocab_size: int, pad_token_id: int
) -> EncoderConfig:
    """`model.*` (minus its display `name`) plus what only the tokenizer knows."""
    settings = model_settings(model)
    try:
        return settings.encoder(vocab_size, pad_token_id)
    except ValueError as error:  # what only the vocabulary decides (the padding id's range)
        raise ConfigError(str(error)) from None
