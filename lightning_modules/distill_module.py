"""LightningModule for knowledge distillation: a frozen teacher, a student, weighted losses.

The losses (each weighted by `DistillLosses`; a zero weight skips its computation):
- `kl`: temperature-scaled KL(teacher || student) over the vocabulary at the masked positions
  only, scaled by T^2 so its gradient keeps its size as T changes (Hinton et al.);
- `mlm`: the student's own masked-LM loss on the true tokens;
- `cosine`: 1 - cos(student, teacher) of the last hidden states at every real token (DistilBERT);
- `hidden_mse`: MSE between the student's hidden states (embeddings and each layer) and those of
  the teacher layers they map to (TinyBERT);
- `attention_mse`: MSE between the mapped layers' attention probabilities (TinyBERT).
When the widths differ, the student's hidden states go through one learned linear projection to
the teacher's width (TinyBERT's W_h); it is trained with the student and dropped afterwards.

The teacher runs without autograd and in eval mode (no dropout), under bf16 autocast when
`teacher_bf16` is set (only in a bf16-mixed run: the stage clears it where the run trains in
another precision): it only produces targets, so its precision costs little and its forward is a
large share of the step.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.utilities.types import OptimizerLRSchedulerConfig
from torch import nn

from lightning_modules.data.distributed import sum_over_ranks
from lightning_modules.distill_losses import DistillLosses
from lightning_modules.models.heads import BertForMaskedLM, MaskedLMOutput
from lightning_modules.models.taps import Tapped, tapped
from lightning_modules.optim import optimizer_config
from lightning_modules.optim_settings import OptimizerSettings


@dataclass
class Forward:
    """One model's forward: masked-LM output, tapped hidden states, mapped attention maps."""

    output: MaskedLMOutput
    taps: Tapped
    attention: list[torch.Tensor] = field(default_factory=list)


class DistillationModule(pl.LightningModule):
    def __init__(
        self,
        student: BertForMaskedLM,
        teacher: BertForMaskedLM,
        losses: DistillLosses,
        layer_map: tuple[int, ...],
        optimizer: OptimizerSettings,
    ) -> None:
        super().__init__()
        self.model = student
        self.teacher = teacher.requires_grad_(False).eval()
        self.losses = losses
        self.layer_map = layer_map
        self.optimizer_settings = optimizer
        student_width, teacher_width = student.config.hidden_size, teacher.config.hidden_size
        self.projection: nn.Module = (
            nn.Identity()
            if student_width == teacher_width
            else nn.Linear(student_width, teacher_width)
        )
        self._validation_sums = torch.zeros(5, dtype=torch.float64)

    def train(self, mode: bool = True) -> DistillationModule:
        """The teacher stays in eval mode (no dropout) whatever Lightning switches."""
        super().train(mode)
        self.teacher.eval()
        return self

    def forward_student(self, batch: dict[str, torch.Tensor]) -> Forward:
        attention = bool(self.losses.attention_mse_weight)
        with tapped(self.model.encoder, attention) as taps:
            output = self.model(batch["input_ids"], batch["labels"], batch.get("attention_mask"))
        maps = [taps.attention(layer) for layer in range(len(self.layer_map))] if attention else []
        return Forward(output, taps, maps)

    def teacher_precision(self, batch: dict[str, torch.Tensor]) -> AbstractContextManager[Any]:
        device = batch["input_ids"].device.type
        if self.losses.teacher_bf16:
            return torch.autocast(device, dtype=torch.bfloat16)
        return nullcontext()

    @torch.no_grad()
    def forward_teacher(self, batch: dict[str, torch.Tensor]) -> Forward:
        attention = bool(self.losses.attention_mse_weight)
        with self.teacher_precision(batch), tapped(self.teacher.encoder, attention) as taps:
            output = self.teacher(batch["input_ids"], batch["labels"], batch.get("attention_mask"))
            maps = [taps.attention(layer) for layer in self.layer_map] if attention else []
        return Forward(output, taps, maps)

    def terms(
        self, student: Forward, teacher: Forward, batch: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """Each weighted loss term, unweighted, by name."""
        losses, terms = self.losses, {"mlm": student.output.loss}
        if losses.kl_weight and student.output.targets.numel():
            temperature = losses.temperature
            terms["kl"] = F.kl_div(
                F.log_softmax(student.output.logits.float() / temperature, -1),
                F.log_softmax(teacher.output.logits.float() / temperature, -1),
                reduction="batchmean",
                log_target=True,
            ) * (temperature**2)
        teacher_hidden = [hidden.float() for hidden in teacher.taps.hidden]
        mask = batch.get("attention_mask")
        if losses.cosine_weight:
            aligned = self.projection(student.taps.hidden[-1])
            similarity = F.cosine_similarity(aligned.float(), teacher_hidden[-1], dim=-1)
            terms["cosine"] = masked_mean(1.0 - similarity, mask)
        if losses.hidden_mse_weight:
            pairs = zip(student.taps.hidden, self.teacher_layers(), strict=True)
            errors = [
                masked_mean((self.projection(s).float() - teacher_hidden[t]).pow(2).mean(-1), mask)
                for s, t in pairs
            ]
            terms["hidden_mse"] = torch.stack(errors).mean()
        if losses.attention_mse_weight:
            errors = [
                F.mse_loss(s, t.float())
                for s, t in zip(student.attention, teacher.attention, strict=True)
            ]
            terms["attention_mse"] = torch.stack(errors).mean()
        return terms

    def teacher_layers(self) -> list[int]:
        """Teacher hidden-state indices for the student's: the embeddings, then mapped layers."""
        return [0, *(layer + 1 for layer in self.layer_map)]

    def weighted(self, terms: dict[str, torch.Tensor]) -> torch.Tensor:
        return sum(getattr(self.losses, f"{name}_weight") * value for name, value in terms.items())  # type: ignore[return-value]

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        teacher = self.forward_teacher(batch)
        student = self.forward_student(batch)
        terms = self.terms(student, teacher, batch)
        loss = self.weighted(terms)
        self.log("train/loss", loss, prog_bar=True)
        self.log_dict({f"train/{name}": value for name, value in terms.items()})
        self.log("train/learning_rate", self.trainer.optimizers[0].param_groups[0]["lr"])
        return loss

    def on_validation_epoch_start(self) -> None:
        self._validation_sums.zero_()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        """The student's masked-LM loss and accuracy, its agreement with the teacher, the teacher's
        loss (the floor the student is chasing)."""
        output = self.model(batch["input_ids"], batch["labels"], batch.get("attention_mask"))
        with torch.no_grad(), self.teacher_precision(batch):
            teacher = self.teacher(batch["input_ids"], batch["labels"], batch.get("attention_mask"))
        count = output.targets.numel()
        predicted = output.logits.argmax(-1)
        self._validation_sums += torch.tensor(
            [
                float(output.loss) * count,
                float((predicted == output.targets).sum()),
                float((predicted == teacher.logits.argmax(-1)).sum()),
                float(teacher.loss) * count,
                float(count),
            ],
            dtype=torch.float64,
        )

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        loss_sum, correct, agree, teacher_sum, count = sum_over_ranks(
            self._validation_sums
        ).tolist()
        loss = loss_sum / max(count, 1.0)
        self.log_dict(
            {
                "val/loss": loss,
                "val/accuracy": correct / max(count, 1.0),
                "val/perplexity": math.exp(min(loss, 50.0)),
                "val/teacher_agreement": agree / max(count, 1.0),
                "val/teacher_loss": teacher_sum / max(count, 1.0),
            },
            sync_dist=True,
        )

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        trained = nn.ModuleDict({"student": self.model, "projection": self.projection})
        return optimizer_config(trained, self.optimizer_settings)


def masked_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over real tokens `(batch, seq)`; packed batches (no mask) are all real."""
    if mask is None:
        return values.mean()
    weights = mask.to(values.dtype)
    return (values * weights).sum() / weights.sum().clamp(min=1.0)
