"""LightningModule for fine-tuning a sequence classifier; evaluation is done outside the loop."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.utilities.types import OptimizerLRSchedulerConfig
from torch.utils.data import DataLoader

from lightning_modules.models.heads import BertForSequenceClassification
from lightning_modules.optim import OptimizerSettings, build_optimizer


class SequenceClassificationModule(pl.LightningModule):
    def __init__(self, model: BertForSequenceClassification, optimizer: OptimizerSettings) -> None:
        super().__init__()
        self.model = model
        self.optimizer_settings = optimizer

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self.model(batch["input_ids"], batch["attention_mask"])
        loss = F.cross_entropy(logits, batch["labels"])
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        optimizer, scheduler = build_optimizer(self.model, self.optimizer_settings)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


@torch.no_grad()
def predict_labels(
    model: BertForSequenceClassification, loader: DataLoader
) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted and true label ids over a whole loader, in eval mode."""
    model.eval()
    predictions, labels = [], []
    for batch in loader:
        logits = model(batch["input_ids"], batch["attention_mask"])
        predictions.append(logits.argmax(-1))
        labels.append(batch["labels"])
    return torch.cat(predictions), torch.cat(labels)
