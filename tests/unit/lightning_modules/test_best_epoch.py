"""The epoch a fine-tuning run keeps: the best validation score, and among epochs that tie on it
(a QA grid at the score of abstaining everywhere) the best tiebreak, with patience counted on
that same order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from lightning_modules.classifier import BestEpoch, FinetuneModule
from lightning_modules.optim_settings import OptimizerSettings
from tests.fakes import quiet_trainer

EPOCHS = 6


class TinyClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(10, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, input_ids: torch.Tensor, *_: Any) -> torch.Tensor:
        return self.out(self.embedding(input_ids).mean(1))


def kept_epoch(tiebreak: Callable[[], float] | None) -> tuple[int, int]:
    """(best epoch, epochs run) of a run whose validation score never moves, patience 2; each
    epoch's tiebreak from `tiebreak` (None: the -inf of a task without one)."""
    batch = {
        "input_ids": torch.tensor([[1, 2], [3, 4]]),
        "attention_mask": torch.ones(2, 2, dtype=torch.bool),
        "token_type_ids": torch.zeros(2, 2, dtype=torch.long),
        "labels": torch.tensor([0, 1]),
    }
    selector = BestEpoch(
        [batch],  # type: ignore[arg-type]
        lambda predictions: (0.5, float("-inf") if tiebreak is None else tiebreak()),
        patience=2,
        predictor=lambda model, loader: [],
    )
    module = FinetuneModule(
        TinyClassifier(), OptimizerSettings(learning_rate=1e-3, total_steps=EPOCHS)
    )
    loader: DataLoader[Any] = DataLoader([batch], batch_size=None)  # type: ignore[arg-type]
    quiet_trainer(EPOCHS, selector).fit(module, train_dataloaders=loader)
    return selector.best_epoch, len(selector.scores)


def test_epochs_that_tie_on_the_score_are_told_apart_by_the_tiebreak() -> None:
    spans: Iterator[float] = iter([0.1, 0.3, 0.2, 0.2, 0.2, 0.2])
    assert kept_epoch(lambda: next(spans)) == (2, 4)  # patience from epoch 2


def test_without_a_tiebreak_the_first_of_equal_epochs_is_kept() -> None:
    assert kept_epoch(None) == (1, 3)
