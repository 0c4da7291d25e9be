"""LightningModule for ELECTRA pretraining; the network and optimiser come injected.

Takes the masked-LM collator's batches unchanged (`input_ids`, `labels`): the original ids are
recovered from the labels. Validation samples replacements from a seeded generator, so the
validation numbers are comparable between evaluations, as the fixed validation mask is.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.types import OptimizerLRSchedulerConfig

from lightning_modules.data.distributed import sum_over_ranks
from lightning_modules.mlm import ThroughputMeter, ThroughputSettings
from lightning_modules.models.electra import (
    ElectraForPreTraining,
    ElectraOutput,
    restore_original_ids,
)
from lightning_modules.optim import OptimizerSettings, optimizer_config


class ReplacedTokenDetectionModule(pl.LightningModule):
    def __init__(
        self,
        model: ElectraForPreTraining,
        optimizer: OptimizerSettings,
        throughput: ThroughputSettings,
        validation_seed: int = 0,
    ) -> None:
        super().__init__()
        self.model = model
        self.optimizer_settings = optimizer
        self.throughput = ThroughputMeter(throughput)
        self.validation_seed = validation_seed
        # Token-weighted sums: total loss, discriminator correct, baseline correct, tokens.
        self._validation_sums = torch.zeros(4, dtype=torch.float64)
        self._validation_sampler: torch.Generator | None = None

    def _run(
        self, batch: dict[str, torch.Tensor], sampler: torch.Generator | None
    ) -> ElectraOutput:
        input_ids, labels = batch["input_ids"], batch["labels"]
        return self.model(
            input_ids,
            labels,
            restore_original_ids(input_ids, labels),
            batch.get("attention_mask"),
            sampler,
            batch.get("document_ids"),
        )

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        output = self._run(batch, None)
        self.log("train/loss", output.loss, prog_bar=True)
        self.log_dict(
            {
                "train/generator_loss": output.generator_loss,
                "train/discriminator_loss": output.discriminator_loss,
                "train/discriminator_accuracy": output.discriminator_accuracy,
                "train/baseline_accuracy": output.baseline_accuracy,
                "train/learning_rate": self.trainer.optimizers[0].param_groups[0]["lr"],
            }
        )
        self.throughput.count(batch["input_ids"].numel() * self.trainer.world_size)  # all ranks
        return output.loss

    def on_train_batch_end(self, outputs: object, batch: object, batch_idx: int) -> None:
        if figures := self.throughput.report(self.global_step):
            self.log_dict(figures)

    def on_validation_epoch_start(self) -> None:
        self._validation_sums.zero_()
        self.throughput.pause()
        self._validation_sampler = torch.Generator(self.device).manual_seed(self.validation_seed)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        output = self._run(batch, self._validation_sampler)
        count = output.scored_tokens
        sums = torch.stack(
            [
                output.loss * count,
                output.discriminator_accuracy * count,
                output.baseline_accuracy * count,
                count,
            ]
        )
        self._validation_sums += sums.detach().double().cpu()

    def on_validation_epoch_end(self) -> None:
        self.throughput.resume()
        if self.trainer.sanity_checking:
            return
        loss_sum, correct, baseline, count = sum_over_ranks(self._validation_sums).tolist()
        count = max(count, 1.0)
        self.log_dict(
            {
                "val/loss": loss_sum / count,
                "val/discriminator_accuracy": correct / count,
                "val/baseline_accuracy": baseline / count,
            },
            sync_dist=True,  # already summed over ranks: keeps Lightning from warning
        )

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        return optimizer_config(self.model, self.optimizer_settings)
