"""LightningModule for masked-LM pretraining; the network and optimiser come injected."""

from __future__ import annotations

import math
import time

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.types import OptimizerLRSchedulerConfig

from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.optim import OptimizerSettings, build_optimizer


class MaskedLanguageModelingModule(pl.LightningModule):
    def __init__(
        self, model: BertForMaskedLM, optimizer: OptimizerSettings, throughput_every_steps: int
    ) -> None:
        super().__init__()
        self.model = model
        self.optimizer_settings = optimizer
        self.throughput_every_steps = throughput_every_steps
        self._validation_sums = torch.zeros(3, dtype=torch.float64)
        self._window_tokens = 0
        self._window_start = time.perf_counter()

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        output = self.model(batch["input_ids"], batch["labels"])
        accuracy = (output.logits.argmax(-1) == output.targets).float().mean()
        self.log("train/loss", output.loss, prog_bar=True)
        self.log("train/accuracy", accuracy)
        self.log("train/learning_rate", self.trainer.optimizers[0].param_groups[0]["lr"])
        self._window_tokens += batch["input_ids"].numel()
        return output.loss

    def on_train_batch_end(self, outputs: object, batch: object, batch_idx: int) -> None:
        if self.global_step % self.throughput_every_steps == 0:
            elapsed = time.perf_counter() - self._window_start
            self.log("train/tokens_per_second", self._window_tokens / max(elapsed, 1e-9))
            self._window_tokens, self._window_start = 0, time.perf_counter()

    def on_validation_epoch_start(self) -> None:
        self._validation_sums.zero_()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        output = self.model(batch["input_ids"], batch["labels"])
        count = output.targets.numel()
        correct = (output.logits.argmax(-1) == output.targets).sum()
        self._validation_sums += torch.tensor(
            [float(output.loss) * count, float(correct), float(count)], dtype=torch.float64
        )

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        loss_sum, correct, count = self._validation_sums.tolist()
        loss = loss_sum / max(count, 1.0)
        self.log_dict(
            {
                "val/loss": loss,
                "val/accuracy": correct / max(count, 1.0),
                "val/perplexity": math.exp(min(loss, 50.0)),
            }
        )

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        optimizer, scheduler = build_optimizer(self.model, self.optimizer_settings)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
