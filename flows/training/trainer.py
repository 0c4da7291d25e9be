"""The Lightning Trainer shared by the pretrain and finetune stages (its settings: settings.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.environments import TorchElasticEnvironment
from pytorch_lightning.loggers import Logger
from pytorch_lightning.strategies import Strategy

from flows.training.precision import ClippingMixedPrecision
from flows.training.settings import TrainerSettings
from flows.training.training_checkpoints import AtomicCheckpointIO


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
    if settings.precision == "auto":
        raise ValueError(
            "trainer.precision=auto reached a Trainer: a run resolves it once, in its plan "
            "(flows/plan.py); a caller outside a run passes the precision to train in"
        )
    if settings.threads:
        torch.set_num_threads(settings.threads)
    plugins: list[Any] = [AtomicCheckpointIO()]  # flows/training/training_checkpoints.py says why
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
    if settings.precision in ("bf16-mixed", "16-mixed") and settings.strategy != "fsdp":
        # Lets mixed-precision runs clip gradients with fused AdamW (precision.py says why).
        plugins.append(ClippingMixedPrecision(settings.precision, settings.accelerator))  # type: ignore[arg-type]
        precision = None
    trainer = pl.Trainer(
        accelerator=settings.accelerator,
        **placement,
        plugins=plugins,
        precision=precision,  # type: ignore[arg-type]
        use_distributed_sampler=False,
        gradient_clip_val=settings.grad_clip or None,
        accumulate_grad_batches=settings.accumulate_grad_batches,
        log_every_n_steps=settings.log_every_steps,
        logger=list(loggers) or False,
        callbacks=[*callbacks, MetricSteps()] if loggers else callbacks,
        default_root_dir=str(root_dir),
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        deterministic=True,
        **limits,
    )
    # `deterministic=True` turns on `torch.use_deterministic_algorithms`, which also fills every
    # new tensor with NaN so reads of uninitialised memory show: 800 `fill_` calls per bf16
    # bert-mini step on CPU, 4.5% of it. The algorithms stay deterministic without the fill.
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    return trainer


def lightning_strategy(settings: TrainerSettings) -> str | Strategy:
    """`auto` means DDP once there is more than one process."""
    if settings.strategy == "fsdp":
        from pytorch_lightning.strategies import FSDPStrategy

        # Full (unsharded) checkpoints: `last.ckpt` stays loadable on any world size.
        return FSDPStrategy(state_dict_type="full")
    if settings.strategy == "ddp" or settings.world_size > 1:
        return "ddp"
    return "auto"


STEP_KEY = "step"  # Lightning reads a logged `step` as the metrics' x value


class MetricSteps(pl.Callback):
    """Records each metric at the optimizer steps done when it was computed, as the progress
    lines and checkpoints count them.

    Lightning numbers a step's metrics by the steps finished before it (the 10th step's loss at
    step 9), and a validation inside the fit the same way, so `compare`'s loss curves sat one
    step left of the logs. Lightning takes a logged `step` as the metrics' x value and does not
    send it as a metric.
    """

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
    ) -> None:
        module.log(STEP_KEY, float(trainer.global_step))  # the optimizer has stepped by now

    def on_validation_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            # The same on every rank: the reduction keeps Lightning from warning, and is exact.
            module.log(STEP_KEY, float(trainer.global_step), sync_dist=True)
