"""Callbacks shared by pretraining and fine-tuning."""

from __future__ import annotations

import logging

import pytorch_lightning as pl

log = logging.getLogger("cloze.training")


class ProgressLog(pl.Callback):
    """One readable log line every N steps; progress bars are noise in orchestrator logs."""

    def __init__(self, every_steps: int, label: str) -> None:
        self.every_steps = every_steps
        self.label = label

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
    ) -> None:
        step = trainer.global_step
        if step % self.every_steps and step != trainer.max_steps:
            return
        metrics = trainer.callback_metrics
        shown = " ".join(
            f"{name.split('/')[-1]}={float(value):.4g}"
            for name, value in sorted(metrics.items())
            if name.startswith("train/")
        )
        total = trainer.max_steps if trainer.max_steps > 0 else "?"
        log.info("%s step %d/%s %s", self.label, step, total, shown)
