"""Settings and Trainer construction shared by the pretrain and finetune stages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.environments import TorchElasticEnvironment
from pytorch_lightning.loggers import Logger
from pytorch_lightning.strategies import Strategy

from flows.core.settings import ConfigError, settings_from
from flows.training.checkpoints import AtomicCheckpointIO
from lightning_modules.models.encoder import EncoderConfig

PRECISIONS = ("32-true", "bf16-mixed")
STRATEGIES = ("auto", "ddp", "fsdp")


@dataclass(frozen=True)
class TrainerSettings:
    """`trainer.*`: the pretraining recipe and where it runs."""

    max_steps: int = 1000
    max_tokens: int | None = None
    batch_size: int = 32  # the global batch, split over devices x num_nodes processes
    learning_rate: float = 5e-4
    weight_decay: float = 0.01
    warmup_steps: int = 100
    schedule: str = "linear"
    beta2: float = 0.98
    grad_clip: float = 1.0
    accumulate_grad_batches: int = 1
    precision: Literal["32-true", "bf16-mixed"] = "32-true"
    val_every_steps: int = 200
    max_validation_sequences: int = 1024
    checkpoint_every_steps: int = 200
    log_every_steps: int = 10
    num_workers: int = 0
    accelerator: str = "cpu"
    devices: int = 1
    num_nodes: int = 1
    strategy: str = "auto"
    threads: int | None = None
    compile: bool = False
    peak_flops: float | None = None

    # Where and how verbosely a run executes does not change the trained weights.
    NOT_IN_KEY = (
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

    def __post_init__(self) -> None:
        for key in (
            "max_steps",
            "batch_size",
            "accumulate_grad_batches",
            "val_every_steps",
            "checkpoint_every_steps",
            "log_every_steps",
            "devices",
            "num_nodes",
            "max_validation_sequences",
        ):
            if getattr(self, key) < 1:
                raise ConfigError(f"trainer.{key}={getattr(self, key)} must be at least 1")
        self._check_scale_out()
        if self.precision not in PRECISIONS:
            raise ConfigError(f"trainer.precision={self.precision!r} must be one of {PRECISIONS}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError(f"trainer.max_tokens={self.max_tokens} must be positive or null")
        if self.peak_flops is not None and self.peak_flops <= 0:
            raise ConfigError(f"trainer.peak_flops={self.peak_flops} must be positive or null")
        if self.warmup_steps < 0 or (
            self.max_tokens is None and self.warmup_steps >= self.max_steps
        ):
            raise ConfigError(
                f"trainer.warmup_steps={self.warmup_steps} must be in "
                f"[0, trainer.max_steps={self.max_steps})"
            )

    @property
    def world_size(self) -> int:
        """Training processes in all: `devices` per node times `num_nodes`."""
        return self.devices * self.num_nodes

    def _check_scale_out(self) -> None:
        """`batch_size` is the global batch, so it must split evenly over the processes."""
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"trainer.strategy={self.strategy!r} must be one of {STRATEGIES}")
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


def encoder_config(model: Mapping[str, Any], vocab_size: int, pad_token_id: int) -> EncoderConfig:
    """`model.*` (minus its display `name`) plus what only the tokenizer knows."""
    fields = {key: value for key, value in model.items() if key != "name"}
    return settings_from(
        EncoderConfig, {**fields, "vocab_size": vocab_size, "pad_token_id": pad_token_id}, "model"
    )


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
    placement: dict[str, Any] = {
        "devices": 1,
        "num_nodes": 1,
        "strategy": "auto",
        "plugins": [AtomicCheckpointIO()],  # flows/training/checkpoints.py says why
    }
    if distributed:
        placement = {
            "devices": settings.devices,
            "num_nodes": settings.num_nodes,
            "strategy": lightning_strategy(settings),
            # Processes are started per rank with torchrun's environment (flows/training/launch.py);
            # named here so a SLURM allocation's variables cannot redefine the ranks.
            "plugins": [TorchElasticEnvironment(), AtomicCheckpointIO()],
        }
    return pl.Trainer(
        accelerator=settings.accelerator,
        **placement,
        use_distributed_sampler=False,
        precision=settings.precision,
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
