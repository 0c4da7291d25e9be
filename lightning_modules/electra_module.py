"""LightningModule for ELECTRA pretraining; the network and optimiser come injected.

Takes the masked-LM collator's batches unchanged (`input_ids`, `labels`): the original ids are
recovered from the labels. Validation samples replacements from a seeded generator, so the
validation numbers are comparable between evaluations, as the fixed validation mask is.
"""

from __future__ import annotations

import torch

from lightning_modules.mlm import PretrainingModule, ThroughputSettings
from lightning_modules.models.electra import (
    ElectraForPreTraining,
    ElectraOutput,
    restore_original_ids,
)
from lightning_modules.optim_settings import OptimizerSettings


class ReplacedTokenDetectionModule(PretrainingModule):
    model: ElectraForPreTraining

    def __init__(
        self,
        model: ElectraForPreTraining,
        optimizer: OptimizerSettings,
        throughput: ThroughputSettings,
        validation_seed: int = 0,
    ) -> None:
        # Token-weighted sums: total loss, discriminator correct, baseline correct, tokens.
        super().__init__(model, optimizer, throughput, validation_sums=4)
        self.validation_seed = validation_seed
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

    def on_validation_epoch_start(self) -> None:
        super().on_validation_epoch_start()
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

    def validation_figures(self, sums: list[float]) -> dict[str, float]:
        loss_sum, correct, baseline, count = sums
        count = max(count, 1.0)
        return {
            "val/loss": loss_sum / count,
            "val/discriminator_accuracy": correct / count,
            "val/baseline_accuracy": baseline / count,
        }
