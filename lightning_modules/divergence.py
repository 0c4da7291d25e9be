"""The divergence guard: training that produced a non-finite loss or gradient stops, and nothing
of it is saved.

A diverged run keeps stepping without complaint (NaN in, NaN out): with `trainer.learning_rate`
far too high the loss was NaN from step 10, and the NaN model went on to be exported,
registered and fine-tuned like any other. The guard records the first step whose gradient norm
(before clipping and the optimizer step) or loss is not finite, and raises before anything of
the run is written: before each checkpoint save, before validation and at the end of training.
With `immediate` (a CPU, where reading a value costs nothing) it raises at that very step.
Otherwise (an accelerator) the record stays on the device and is read only at those points and
every `check_every_steps` steps: reading it every step would make the host wait for the device
every step. The steps in between compute on NaN and are thrown away; none of them is saved.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl
import torch


class TrainingDiverged(RuntimeError):
    """A training run's loss or gradient norm stopped being finite; the message names the step,
    the value, and what to change if it repeats."""


class DivergenceGuard(pl.Callback):
    """Raises TrainingDiverged once a gradient norm or loss was not finite.

    `stage` names the run in the message; `advice` (given by the caller, which knows the
    settings) says what is kept and what to change if it happens again.
    """

    def __init__(
        self, stage: str, advice: str, immediate: bool = True, check_every_steps: int = 1
    ) -> None:
        self.stage = stage
        self.advice = advice
        self.immediate = immediate
        self.check_every_steps = check_every_steps
        self.first: torch.Tensor | None = None  # [step, kind, value] of the first, or step -1
        self.resumed_at = 0  # the step this fit started from (0: from the start)

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self.resumed_at = trainer.global_step

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        grads = [param.grad for param in module.parameters() if param.grad is not None]
        if grads:
            self.note(trainer, torch.nn.utils.get_total_norm(grads), 0)

    def on_train_batch_end(
        self, trainer: pl.Trainer, module: pl.LightningModule, outputs: Any, *args: Any
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor):
            self.note(trainer, loss.reshape(-1)[0], 1)
        if trainer.global_step % self.check_every_steps == 0:
            self.check(trainer)

    def on_save_checkpoint(self, trainer: pl.Trainer, *args: Any) -> None:
        self.check(trainer)  # raising here, before the checkpoint is written, writes none

    def on_validation_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self.check(trainer)

    def on_train_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.check(trainer)

    def note(self, trainer: pl.Trainer, value: torch.Tensor, kind: int) -> None:
        """Records `value` if it is the first non-finite one (kind 0: a gradient norm, taken
        before its step; 1: a loss, after it); raises at once if `immediate`."""
        value = value.detach().float()
        step = trainer.global_step + (1 if kind == 0 else 0)  # the step being taken, from 1
        record = torch.stack([value.new_tensor(float(step)), value.new_tensor(float(kind)), value])
        if self.first is None:
            self.first = torch.full_like(record, -1.0)
        bad = ~torch.isfinite(value) & (self.first[0] < 0)
        self.first = torch.where(bad, record, self.first)
        if self.immediate:
            self.check(trainer)

    def check(self, trainer: pl.Trainer) -> None:
        if self.first is None:
            return
        step, kind, value = self.first.tolist()
        if step < 0:
            return
        quantity = ("gradient norm", "training loss")[int(kind)]
        total = f" of {trainer.max_steps}" if trainer.max_steps > 0 else ""
        resumed = f", resumed at step {self.resumed_at}" if self.resumed_at else ""
        raise TrainingDiverged(
            f"{self.stage} diverged at step {int(step)}{total}{resumed}: the {quantity} is "
            f"{value}. {self.advice}"
        )
