"""LightningModule for masked-LM pretraining; the network and optimiser come injected."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.types import OptimizerLRSchedulerConfig
from torch import nn

from lightning_modules.data.distributed import LOSS_WEIGHT, sum_over_ranks
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.optim import optimizer_config
from lightning_modules.optim_settings import OptimizerSettings


@dataclass(frozen=True)
class ThroughputSettings:
    """How often to log speed, and what to divide it by: `peak_flops` (FLOP/s) enables MFU."""

    every_steps: int
    flops_per_token: float
    peak_flops: float | None = None


class ThroughputMeter:
    """Tokens/s, model TFLOP/s and MFU over the steps since the last report.

    Validation pauses the clock: evaluation time is not training throughput.
    """

    def __init__(self, settings: ThroughputSettings) -> None:
        self.settings = settings
        self.tokens: int | torch.Tensor = 0
        self.started = time.perf_counter()
        self.paused_at = 0.0

    def count(self, tokens: int | torch.Tensor) -> None:
        """A tensor count (padded batches) stays on its device until `report`: converting it here
        would wait for the GPU every step."""
        self.tokens += tokens

    def pause(self) -> None:
        self.paused_at = time.perf_counter()

    def resume(self) -> None:
        self.started += time.perf_counter() - self.paused_at

    def report(self, step: int) -> dict[str, float]:
        """The window's figures every `every_steps` steps (then a new window), else nothing."""
        if step % self.settings.every_steps:
            return {}
        tokens_per_second = float(self.tokens) / max(time.perf_counter() - self.started, 1e-9)
        flops = tokens_per_second * self.settings.flops_per_token
        figures = {
            "train/tokens_per_second": tokens_per_second,
            "train/model_tflops": flops / 1e12,
        }
        if self.settings.peak_flops:
            figures["train/mfu"] = flops / self.settings.peak_flops
        self.tokens, self.started = 0, time.perf_counter()
        return figures


def top_scored(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Whether each target's logit is its row's maximum: `argmax == target` up to exact ties
    (a tie counts as correct). The training accuracy of every step: bf16 `argmax` over the
    masked positions' logits took 8% of a bert-mini step on CPU, `amax` a twentieth of that."""
    return logits.gather(1, targets[:, None]).squeeze(1) >= logits.amax(-1)


class PretrainingModule(pl.LightningModule):
    """What every pretraining objective's module shares: the injected network and optimizer, the
    throughput meter (paused while validating), and validation sums added up over ranks.

    A subclass adds its batch's token-weighted figures to `_validation_sums` in `validation_step`
    and turns the ranks' totals into logged figures in `validation_figures`.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerSettings,
        throughput: ThroughputSettings,
        validation_sums: int,
    ) -> None:
        super().__init__()
        self.model = model
        self.optimizer_settings = optimizer
        self.throughput = ThroughputMeter(throughput)
        self._validation_sums = torch.zeros(validation_sums, dtype=torch.float64)

    def on_train_batch_end(self, outputs: object, batch: object, batch_idx: int) -> None:
        if figures := self.throughput.report(self.global_step):
            self.log_dict(figures)

    def on_validation_epoch_start(self) -> None:
        self._validation_sums.zero_()
        self.throughput.pause()

    def on_validation_epoch_end(self) -> None:
        self.throughput.resume()
        if self.trainer.sanity_checking:
            return
        self.log_dict(
            self.validation_figures(sum_over_ranks(self._validation_sums).tolist()),
            sync_dist=True,  # already summed over ranks: keeps Lightning from warning
        )

    def validation_figures(self, sums: list[float]) -> dict[str, float]:
        raise NotImplementedError

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        return optimizer_config(self.model, self.optimizer_settings)


class MaskedLanguageModelingModule(PretrainingModule):
    model: BertForMaskedLM

    def __init__(
        self, model: BertForMaskedLM, optimizer: OptimizerSettings, throughput: ThroughputSettings
    ) -> None:
        # Token-weighted sums: total loss, correct predictions, tokens.
        super().__init__(model, optimizer, throughput, validation_sums=3)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        attention_mask = batch.get("attention_mask")
        output = self.model(
            batch["input_ids"], batch["labels"], attention_mask, batch.get("document_ids")
        )
        # Under DDP: this rank's share of the global batch's masked tokens (distributed.py), so
        # the averaged gradient and the rank-averaged logs are those of the global batch.
        weight = batch.get(LOSS_WEIGHT)
        loss = output.loss if weight is None else output.loss * weight
        correct = top_scored(output.logits, output.targets).float()
        accuracy = (
            correct.mean() if weight is None else correct.sum() * weight / max(len(correct), 1)
        )
        self.log("train/loss", loss, prog_bar=True, sync_dist=weight is not None)
        self.log("train/accuracy", accuracy, sync_dist=weight is not None)
        self.log("train/learning_rate", self.trainer.optimizers[0].param_groups[0]["lr"])
        tokens = batch["input_ids"].numel() if attention_mask is None else attention_mask.sum()
        # All ranks' tokens: each holds an equal block of the global batch (distributed.py).
        self.throughput.count(tokens * self.trainer.world_size)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        output = self.model(
            batch["input_ids"],
            batch["labels"],
            batch.get("attention_mask"),
            batch.get("document_ids"),
        )
        count = output.targets.numel()
        correct = (output.logits.argmax(-1) == output.targets).sum()
        self._validation_sums += torch.tensor(
            [float(output.loss) * count, float(correct), float(count)], dtype=torch.float64
        )

    def validation_figures(self, sums: list[float]) -> dict[str, float]:
        loss_sum, correct, count = sums
        loss = loss_sum / max(count, 1.0)
        return {
            "val/loss": loss,
            "val/accuracy": correct / max(count, 1.0),
            "val/perplexity": math.exp(min(loss, 50.0)),
        }
