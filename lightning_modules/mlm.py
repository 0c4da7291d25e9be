"""LightningModule for masked-LM pretraining; the network and optimiser come injected."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.apply_func import move_data_to_device
from pytorch_lightning.utilities.types import OptimizerLRSchedulerConfig
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

from lightning_modules.data.distributed import LOSS_WEIGHT, sum_over_ranks
from lightning_modules.data.mlm_datamodule import GENERAL_ROW
from lightning_modules.models.config import IGNORE_INDEX
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.optim import optimizer_config
from lightning_modules.optim_settings import OptimizerSettings

log = logging.getLogger("cloze.training")


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


def token_cosine_sums(
    hidden: torch.Tensor, base: torch.Tensor, attention_mask: torch.Tensor | None
) -> tuple[float, float]:
    """The sum of the cosine similarities of two encoders' outputs, token by token, over the
    real (unpadded) tokens, and their count."""
    cosine = F.cosine_similarity(hidden.float(), base.float(), dim=-1)
    if attention_mask is None:
        return float(cosine.sum()), float(cosine.numel())
    real = attention_mask.bool()
    return float(cosine[real].sum()), float(real.sum())


class MaskedLanguageModelingModule(PretrainingModule):
    """The masked-LM objective. Continuing a checkpoint, it can also keep the base encoder
    (`track_drift_from`) to log how far the encoder has moved from it, and train the head alone
    for the first `optimizer.head_only_steps` steps (a checkpoint without an MLM head: a random
    head's gradients would otherwise tear the pretrained features apart)."""

    model: BertForMaskedLM

    def __init__(
        self,
        model: BertForMaskedLM,
        optimizer: OptimizerSettings,
        throughput: ThroughputSettings,
        general_validation: bool = False,
    ) -> None:
        """`general_validation`: a second validation loader (dataloader_idx 1) holds general
        text, logged as `val_general/loss` and `val_general/accuracy`: what the model forgot.
        Each of its rows' figures are kept too (`general_rows`), so the change between two
        validations gets an interval from a paired bootstrap over the rows."""
        # Token-weighted sums: total loss, correct predictions, tokens; cosine to base, tokens;
        # the general rows' total loss, correct predictions, tokens.
        super().__init__(model, optimizer, throughput, validation_sums=8)
        self.general_validation = general_validation
        self._base: list[nn.Module] = []  # a list: not a submodule, so never in a checkpoint
        # The last validation's general rows, one per row: [loss sum, correct, masked tokens],
        # summed over ranks (None before the first, or when off).
        self.general_rows: torch.Tensor | None = None
        self._general_row_sums = torch.zeros(0, 3, dtype=torch.float64)
        # Validation at the head warm-up's end (`val/loss`, ...; empty without a warm-up): the
        # "before" of what the run learned and forgot. Step 0's fresh head scores chance there.
        self.head_warmup_validation: dict[str, float] = {}
        self.head_warmup_general_rows: torch.Tensor | None = None

    def track_drift_from(self, base: nn.Module) -> None:
        """Logs `train/cosine_to_base` at each validation: the mean cosine similarity of the
        encoder's token outputs to `base`'s (a frozen copy of the encoder it started from)."""
        self._base = [base.eval().requires_grad_(False)]

    @property
    def head_only(self) -> bool:
        return self.global_step < self.optimizer_settings.head_only_steps

    def on_train_batch_start(self, batch: object, batch_idx: int) -> None:
        steps = self.optimizer_settings.head_only_steps
        if steps and self.global_step in (0, steps) and self.trainer.is_global_zero:
            if self.head_only:
                log.info("head warm-up: the new MLM head trains alone for %d steps", steps)
            else:
                log.info("head warm-up done at step %d: the whole model continues", steps)
        if steps and self.global_step == steps and not self.head_warmup_validation:
            if not (loaders := self.trainer.val_dataloaders):
                return  # a fit without validation has nothing to measure from
            self.head_warmup_validation = self.validate_now(loaders)
            self.head_warmup_general_rows = self.general_rows
            for logger in self.loggers:  # the curve's point there, as a validation logs it
                logger.log_metrics(self.head_warmup_validation, step=steps)

    def validate_now(self, loaders: DataLoader | list[DataLoader]) -> dict[str, float]:
        """The validation figures of the weights as they are, scored here rather than by
        Lightning's loop, which validates only every `trainer.val_every_steps`: the fit's own
        loaders (rows and fixed masks) through `validation_step`, at the run's precision, summed
        over ranks (every rank reaches this step together), named as logged (`val/loss`, ...)."""
        self.throughput.pause()
        self._validation_sums.zero_()
        self.reset_general_rows(loaders)
        self.eval()
        with torch.no_grad(), self.trainer.precision_plugin.forward_context():
            for index, loader in enumerate(loaders if isinstance(loaders, list) else [loaders]):
                for batch in loader:
                    self.validation_step(move_data_to_device(batch, self.device), 0, index)
        self.train()
        figures = self.validation_figures(sum_over_ranks(self._validation_sums).tolist())
        self.keep_general_rows()
        self._validation_sums.zero_()
        self.throughput.resume()
        return {name: value for name, value in figures.items() if name.startswith("val")}

    def on_validation_epoch_start(self) -> None:
        super().on_validation_epoch_start()
        self.reset_general_rows(self.trainer.val_dataloaders)

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        if not self.trainer.sanity_checking:
            self.keep_general_rows()

    def reset_general_rows(self, loaders: DataLoader | list[DataLoader] | None) -> None:
        """One zeroed row of sums per general row: the general loader is the second one."""
        if self.general_validation and isinstance(loaders, list) and len(loaders) > 1:
            rows = len(loaders[1].dataset)  # type: ignore[arg-type]
            self._general_row_sums = torch.zeros(rows, 3, dtype=torch.float64)

    def keep_general_rows(self) -> None:
        if len(self._general_row_sums):
            self.general_rows = sum_over_ranks(self._general_row_sums)

    def on_save_checkpoint(self, checkpoint: dict[str, object]) -> None:
        checkpoint["head_warmup_validation"] = self.head_warmup_validation  # kept across resumes
        if self.head_warmup_general_rows is not None:
            checkpoint["head_warmup_general_rows"] = self.head_warmup_general_rows.tolist()

    def on_load_checkpoint(self, checkpoint: dict[str, object]) -> None:
        saved = checkpoint.get("head_warmup_validation", {})
        self.head_warmup_validation = dict(saved) if isinstance(saved, dict) else {}
        rows = checkpoint.get("head_warmup_general_rows")
        self.head_warmup_general_rows = (
            None if rows is None else torch.tensor(rows, dtype=torch.float64)
        )

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """During the head warm-up the encoder (and the word table the decoder is tied to) takes
        no step: AdamW skips a parameter without a gradient, so not even weight decay moves it.
        Dropping the gradients after backward, rather than freezing, keeps DDP's reducer whole."""
        if self.head_only:
            for parameter in self.model.encoder.parameters():
                parameter.grad = None

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
        if self.optimizer_settings.head_only_steps:
            self.log("train/head_only", float(self.head_only))
        tokens = batch["input_ids"].numel() if attention_mask is None else attention_mask.sum()
        # All ranks' tokens: each holds an equal block of the global batch (distributed.py).
        self.throughput.count(tokens * self.trainer.world_size)
        return loss

    def validation_step(
        self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        ids, mask, documents = (
            batch["input_ids"],
            batch.get("attention_mask"),
            batch.get("document_ids"),
        )
        output = self.model(ids, batch["labels"], mask, documents)
        if dataloader_idx == 1:  # the general rows
            self.add_general_rows(batch, output.logits, output.targets)
            return
        count = output.targets.numel()
        correct = (output.logits.argmax(-1) == output.targets).sum()
        scored = [float(output.loss) * count, float(correct), float(count)]
        drift = (0.0, 0.0)
        if self._base:
            base = self._base[0].to(ids.device)
            hidden = self.model.encoder(ids, mask, document_ids=documents)
            drift = token_cosine_sums(hidden, base(ids, mask, document_ids=documents), mask)
        self._validation_sums[:5] += torch.tensor([*scored, *drift], dtype=torch.float64)

    def add_general_rows(
        self, batch: dict[str, torch.Tensor], logits: torch.Tensor, targets: torch.Tensor
    ) -> None:
        """Adds each masked token's loss, whether it was predicted, and 1 to its row's sums,
        and their totals to the validation sums: the logits are those of the labelled
        positions in row-major order (`BertForMaskedLM`), so each one's row is known."""
        picked = (batch["labels"] != IGNORE_INDEX).nonzero()[:, 0]
        losses = F.cross_entropy(logits.float(), targets, reduction="none")
        correct = logits.argmax(-1) == targets
        scored = torch.stack([losses, correct.float(), torch.ones_like(losses)], 1).double().cpu()
        rows = batch[GENERAL_ROW].cpu().index_select(0, picked.cpu())
        self._general_row_sums.index_add_(0, rows, scored)
        self._validation_sums[5:] += scored.sum(0)

    def validation_figures(self, sums: list[float]) -> dict[str, float]:
        loss_sum, correct, count, cosine_sum, tokens, general_loss, general_correct, general = sums
        loss = loss_sum / max(count, 1.0)
        figures = {
            "val/loss": loss,
            "val/accuracy": correct / max(count, 1.0),
            "val/perplexity": math.exp(min(loss, 50.0)),
        }
        if self._base:
            figures["train/cosine_to_base"] = cosine_sum / max(tokens, 1.0)
        if self.general_validation:
            figures["val_general/loss"] = general_loss / max(general, 1.0)
            figures["val_general/accuracy"] = general_correct / max(general, 1.0)
        return figures
