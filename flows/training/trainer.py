"""Settings and Trainer construction shared by the pretrain and finetune stages."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.environments import TorchElasticEnvironment
from pydantic import create_model, model_validator
from pytorch_lightning.loggers import Logger
from pytorch_lightning.strategies import Strategy

from flows.core.settings import ConfigError, Number, Settings, bounds, one_of, settings_from
from flows.training.checkpoints import AtomicCheckpointIO
from flows.training.precision import BF16MixedPrecision
from lightning_modules.models.encoder import EncoderConfig
from lightning_modules.optim import SCHEDULES, OptimizerSettings

PRECISIONS = ("32-true", "bf16-mixed")
STRATEGIES = ("auto", "ddp", "fsdp")


class TrainerSettings(Settings):
    """`trainer.*`: the pretraining recipe and where it runs."""

    section = "trainer"
    max_steps: Annotated[int, bounds(ge=1)] = 1000
    max_tokens: Annotated[int, bounds(ge=1)] | None = None
    batch_size: Annotated[int, bounds(ge=1)] = 32  # the global batch, over devices x num_nodes
    learning_rate: Annotated[Number, bounds(gt=0)] = 5e-4
    weight_decay: Annotated[Number, bounds(ge=0)] = 0.01
    warmup_steps: Annotated[int, bounds(ge=0)] = 100
    schedule: Annotated[str, one_of(SCHEDULES)] = "linear"
    beta2: Annotated[Number, bounds(ge=0, lt=1)] = 0.98
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
        if self.max_tokens is None and self.warmup_steps >= self.max_steps:
            raise ConfigError(
                f"trainer.warmup_steps={self.warmup_steps} must be in "
                f"[0, trainer.max_steps={self.max_steps})"
            )
        self._check_scale_out()
        return self

    def optimizer(self, total_steps: int) -> OptimizerSettings:
        """The AdamW recipe of these settings for a run of `total_steps` steps."""
        return OptimizerSettings(
            learning_rate=self.learning_rate,
            weight_decay=self.weight_decay,
            warmup_steps=self.warmup_steps,
            total_steps=total_steps,
            schedule=self.schedule,
            beta2=self.beta2,
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
        if self.warmup_steps >= steps:
            raise ConfigError(
                f"trainer.max_tokens={self.max_tokens} gives {steps} steps of {tokens_per_step} "
                f"tokens, not more than trainer.warmup_steps={self.warmup_steps}"
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


def _shape_fields() -> dict[str, Any]:
    """`EncoderConfig`'s fields as settings fields, so the shape is declared once (there)."""
    hints = typing.get_type_hints(EncoderConfig)
    numbers = {float: Number, float | None: Number | None}
    return {
        field.name: (
            numbers.get(hints[field.name], hints[field.name]),
            ... if field.default is dataclasses.MISSING else field.default,
        )
        for field in dataclasses.fields(EncoderConfig)
    }


# `model.*` plus what only the tokenizer knows (vocab_size, pad_token_id).
ModelSettings: type[ModelShape] = create_model(  # type: ignore[call-overload]
    "ModelSettings", __base__=ModelShape, **_shape_fields()
)


def encoder_config(model: Mapping[str, Any], vocab_size: int, pad_token_id: int) -> EncoderConfig:
    """`model.*` (minus its display `name`) plus what only the tokenizer knows."""
    settings = settings_from(
        ModelSettings, {**model, "vocab_size": vocab_size, "pad_token_id": pad_token_id}, "model"
    )
    return EncoderConfig(**settings.model_dump(exclude={"name"}))


def make_trainer(
    settings: TrainerSettings,
    root_dir: Path,
    loggers: Sequence[Logger],
    callbacks: list[pl.Callback],
    distributed: bool = False,
    **limits: Any,
) -> pl.Trainer:
    """A Trainer on one device, or on `settings.world_size` processes when `distributed`.

    `distributed` is only for processes started one per rank (flows/training/launch.py, torchrun):
    Lightning's own launcher would re-run the whole program (the flow, MLflow) in every rank.
    Data modules shard the global batch themselves, so Lightning's sampler injection is off.
    """
    if settings.threads:
        torch.set_num_threads(settings.threads)
    plugins: list[Any] = [AtomicCheckpointIO()]  # flows/training/checkpoints.py says why
    placement: dict[str, Any] = {"devices": 1, "num_nodes": 1, "strategy": "auto"}
    if distributed:
        placement = {
            "devices": settings.devices,
            "num_nodes": settings.num_nodes,
            "strategy": lightning_strategy(settings),
        }
        # Processes are started per rank with torchrun's environment (flows/training/launch.py);
        # named here so a SLURM allocation's variables cannot redefine the ranks.
        plugins.append(TorchElasticEnvironment())
    precision: str | None = settings.precision
    if settings.precision == "bf16-mixed" and settings.strategy != "fsdp":
        # Lets bf16 runs clip gradients with fused AdamW (precision.py says why).
        plugins.append(BF16MixedPrecision(settings.accelerator))
        precision = None
    return pl.Trainer(
        accelerator=settings.accelerator,
        **placement,
        plugins=plugins,
        precision=precision,  # type: ignore[arg-type]
        use_distributed_sampler=False,
        gradient_clip_val=settings.grad_clip or None,
        accumulate_grad_batches=settings.accumulate_grad_batches,
        log_every_n_steps=settings.log_every_steps,
        logger=list(loggers) or False,
        callbacks=callbacks,
        default_root_dir=str(root_dir),
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        deterministic=True,
        **limits,
    )


def lightning_strategy(settings: TrainerSettings) -> str | Strategy:
    """`auto` means DDP once there is more than one process."""
    if settings.strategy == "fsdp":
        from pytorch_lightning.strategies import FSDPStrategy

        # Full (unsharded) checkpoints: `last.ckpt` stays loadable on any world size.
        return FSDPStrategy(state_dict_type="full")
    if settings.strategy == "ddp" or settings.world_size > 1:
        return "ddp"
    return "auto"
