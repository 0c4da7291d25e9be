"""The divergence guard: training that produced a non-finite loss or gradient stops at once.

A diverged run keeps stepping without complaint (NaN in, NaN out): with `trainer.learning_rate`
far too high the loss was NaN from step 10, and the NaN model went on to be exported,
registered and fine-tuned like any other. The guard checks the gradient norm before each
optimizer step and the loss after it, so no NaN reaches the weights and no later checkpoint is
saved: Lightning runs checkpoint callbacks after all others, and this one raises first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl
import torch


class TrainingDiverged(RuntimeError):
    """A training run's loss or gradient norm stopped being finite; the message names the step
    and what to change."""


class DivergenceGuard(pl.Callback):
    """Raises TrainingDiverged at the first non-finite gradient norm or loss.

    `stage` names the run in the message; `advice` (given by the caller, which knows the
    settings) says which setting is most likely at fault and what is kept.
    """

    def __init__(self, stage: str, advice: str) -> None:
        self.stage = stage
        self.advice = advice

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        # Before clipping and before the step: the weights are still those of the last step.
        grads = [param.grad for param in module.parameters() if param.grad is not None]
        if grads:
            norm = float(torch.nn.utils.get_total_norm(grads))
            if not math.isfinite(norm):
                self.stop(trainer, trainer.global_step + 1, "gradient norm", norm)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss.detach()).all()):
            self.stop(trainer, max(trainer.global_step, 1), "training loss", float(loss))

    def stop(self, trainer: pl.Trainer, step: int, quantity: str, value: float) -> None:
        total = f" of {trainer.max_steps}" if trainer.max_steps > 0 else ""
        raise TrainingDiverged(
            f"{self.stage} diverged at step {step}{total}: the {quantity} is {value}. {self.advice}"
        )
