"""Fine-tuning a classifier or tagger, with the epoch chosen on the validation split.

Scoring is done outside Lightning's validation loop: the task metrics (entity F1 among them) need
whole-split predictions aligned to words, which a per-batch `validation_step` cannot give.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.utilities.types import OptimizerLRSchedulerConfig
from torch import nn
from torch.utils.data import DataLoader, Sampler

from lightning_modules.models.config import IGNORE_INDEX
from lightning_modules.optim import optimizer_config
from lightning_modules.optim_settings import OptimizerSettings

Predictions = list[Any]  # an int per example, or a list of tag ids per sentence


class FinetuneModule(pl.LightningModule):
    """Cross-entropy over `(batch, C)` or `(batch, T, C)` logits, -100 labels ignored; binary
    cross-entropy per label for float (multi-hot) targets."""

    def __init__(self, model: nn.Module, optimizer: OptimizerSettings) -> None:
        super().__init__()
        self.model = model
        self.optimizer_settings = optimizer

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        labels = batch["labels"]
        if labels.is_floating_point():  # multi-hot targets: a sigmoid per label (multi-label)
            loss = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
        else:
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX
            )
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        return optimizer_config(self.model, self.optimizer_settings)


class LengthOrder(Sampler[int]):
    """Scoring order: shortest examples first, so a batch pads little. In split order a batch of
    32 NER sentences held 2.2x its real tokens (NCBI-disease and BC5CDR validation, MiniLM's
    tokenizer); sorted, 1.05x. `restore` puts outputs back into split order."""

    def __init__(self, lengths: Sequence[int]) -> None:
        self.order = sorted(range(len(lengths)), key=lengths.__getitem__)  # stable: ties in order

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)

    def restore(self, outputs: list[Any]) -> list[Any]:
        restored: list[Any] = [None] * len(outputs)
        for position, output in zip(self.order, outputs, strict=True):
            restored[position] = output
        return restored


class LengthGroups(Sampler[int]):
    """Training order whose batches hold examples of like length, so a batch pads little (random
    batches of NCBI-disease train held about 2.2x their real tokens), while each epoch still draws
    new batches: the examples are shuffled, cut into chunks of up to 50 batches (at least 4 chunks
    where the split allows, so the batches change between epochs), each chunk is sorted by
    length and cut into batches, and the batches are shuffled. Read `batch_size` at a time, as a
    DataLoader does; the one short batch comes last. The order follows `seed` and the epoch
    (`set_epoch`, which Lightning calls before each one)."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int) -> None:
        self.lengths = lengths
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0
        per_chunk = min(50, max(1, len(lengths) // (4 * batch_size)))
        self.chunk = per_chunk * batch_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[int]]:
        """This epoch's batches, in the order they are read."""
        draw = random.Random(f"length groups {self.seed} {self.epoch}")
        order = list(range(len(self.lengths)))
        draw.shuffle(order)
        batches = []
        for start in range(0, len(order), self.chunk):
            chunk = sorted(order[start : start + self.chunk], key=self.lengths.__getitem__)
            batches += [
                chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)
            ]
        short = [batches.pop()] if batches and len(batches[-1]) < self.batch_size else []
        draw.shuffle(batches)
        return batches + short

    def __iter__(self) -> Iterator[int]:
        return (position for batch in self.batches() for position in batch)

    def __len__(self) -> int:
        return len(self.lengths)


def in_split_order(loader: DataLoader, outputs: list[Any]) -> list[Any]:
    """Outputs in the order of the loader's dataset, whatever order it was read in."""
    sampler = loader.sampler
    return sampler.restore(outputs) if isinstance(sampler, LengthOrder) else outputs


@torch.no_grad()
def predict(model: nn.Module, loader: DataLoader) -> Predictions:
    """Per example, in loader order: a label id, or the tag ids at the labelled positions."""
    was_training = model.training
    model.eval()
    predictions: list[Any] = []
    for batch in loader:
        logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        best = logits.argmax(-1)
        if best.dim() == 1:
            predictions.extend(best.tolist())
        else:
            labelled = batch["labels"] != IGNORE_INDEX
            predictions.extend(row[mask].tolist() for row, mask in zip(best, labelled, strict=True))
    model.train(was_training)
    return in_split_order(loader, predictions)


@torch.no_grad()
def predict_spans(model: nn.Module, loader: DataLoader) -> Predictions:
    """Per window, in loader order: its start and end logits over its real tokens, for the
    question-answering decoder (flows/downstream/tasks/qa_decoding.py)."""
    was_training = model.training
    model.eval()
    windows: list[Any] = []
    for batch in loader:
        logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        for row, length in zip(
            logits.float(), batch["attention_mask"].sum(1).tolist(), strict=True
        ):
            windows.append((row[0, :length].tolist(), row[1, :length].tolist()))
    model.train(was_training)
    return in_split_order(loader, windows)


class BestEpoch(pl.Callback):
    """Scores the validation split after each epoch, keeps the best weights, stops on patience.

    Restoring the best epoch's weights makes the epoch count a choice made on validation, per
    arm, like the learning rate; test data is never looked at during training. `score` gives an
    epoch's (score, tiebreak): epochs that tie on the score are told apart by the tiebreak
    (question answering: every epoch may score what abstaining on every question scores, while
    the span skill still grows; -inf where a task has none). One call gives both, so a QA
    epoch's window logits are decoded once.
    """

    def __init__(
        self,
        loader: DataLoader,
        score: Callable[[Predictions], tuple[float, float]],
        patience: int,
        predictor: Callable[[nn.Module, DataLoader], Predictions] = predict,
        behind: Callable[[int, float], bool] | None = None,
    ) -> None:
        """`behind(epoch, best score so far)` says when the run trails a rival too far to go on
        (a grid's pruning rule); None: only patience stops it."""
        self.loader = loader
        self.predictor = predictor
        self.score = score
        self.patience = patience
        self.behind = behind
        self.scores: list[float] = []  # after each epoch: what pruning a later run reads
        self.pruned = False
        self.best_score = float("-inf")
        self.best_tiebreak = float("-inf")  # the best epoch's tiebreak; -inf without one
        self.best_epoch = 0
        self.best_state: dict[str, torch.Tensor] | None = None

    def on_train_epoch_end(self, trainer: pl.Trainer, module: FinetuneModule) -> None:  # type: ignore[override]
        # Lightning autocasts its own steps only: a callback's forward passes would run in fp32
        # (on a bf16-native CPU, half of a fine-tuning run's time went to this scoring).
        with trainer.precision_plugin.forward_context():
            predictions = self.predictor(module.model, self.loader)
        score, tiebreak = self.score(predictions)
        epoch = trainer.current_epoch + 1
        module.log("val/score", score)
        self.scores.append(score)
        if (score, tiebreak) > (self.best_score, self.best_tiebreak):
            self.best_score, self.best_tiebreak, self.best_epoch = score, tiebreak, epoch
            self.best_state = copy.deepcopy(module.model.state_dict())
        elif epoch - self.best_epoch >= self.patience:
            trainer.should_stop = True
        if self.behind is not None and self.behind(epoch, self.best_score):
            self.pruned = trainer.should_stop = True

    def restore(self, model: nn.Module) -> None:
        if self.best_state is not None:
            model.load_state_dict(self.best_state)
