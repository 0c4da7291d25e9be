"""Training batches of like length (`LengthGroups`): new batches every epoch, each example once,
the same for the same seed, and far less padding than random batches."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_modules.classifier import LengthGroups
from tests.fakes import quiet_trainer

BATCH = 32


def sentence_lengths(count: int, seed: int = 0) -> list[int]:
    """Token counts shaped like NER sentences under a WordPiece tokenizer: log-normal around 30
    (a long tail of long sentences), cut to 3..128 as `max_length` cuts them."""
    draw = random.Random(seed)
    return [min(128, max(3, round(draw.lognormvariate(3.4, 0.5)))) for _ in range(count)]


def padding_ratio(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Padded tokens over real ones: each batch is as wide as its longest example."""
    padded = sum(len(batch) * max(lengths[i] for i in batch) for batch in batches)
    return padded / sum(lengths[i] for batch in batches for i in batch)


def test_the_same_seed_and_epoch_give_the_same_batches_and_another_epoch_new_ones() -> None:
    lengths = sentence_lengths(1000)
    first, again = LengthGroups(lengths, BATCH, 7), LengthGroups(lengths, BATCH, 7)
    assert first.batches() == again.batches()
    assert list(first) == [i for batch in first.batches() for i in batch]
    other_seed = LengthGroups(lengths, BATCH, 8).batches()
    first.set_epoch(1)
    # not only reordered: chunks of 7 batches (1000 // (4 * 32)) are drawn anew
    for other in (first.batches(), other_seed):
        assert {frozenset(b) for b in other} != {frozenset(b) for b in again.batches()}


@pytest.mark.parametrize("count", [0, 1, 31, 32, 33, 1000, 5003])
def test_every_example_once_per_epoch_in_full_batches_but_the_last(count: int) -> None:
    groups = LengthGroups(sentence_lengths(count), BATCH, 1)
    for epoch in range(3):
        groups.set_epoch(epoch)
        batches = groups.batches()
        assert sorted(i for batch in batches for i in batch) == list(range(count))
        assert all(len(batch) == BATCH for batch in batches[:-1])
        assert len(batches) == -(-count // BATCH)  # the steps a run's schedule counts
        assert len(groups) == count


def test_batches_of_like_length_pad_far_less_than_random_ones() -> None:
    """1,000 sentences (a 1,000-label sample), batches of 32, over five epochs."""
    lengths = sentence_lengths(1000)
    groups, draw = LengthGroups(lengths, BATCH, 3), random.Random(3)
    grouped, shuffled = [], []
    for epoch in range(5):
        groups.set_epoch(epoch)
        grouped.append(padding_ratio(lengths, groups.batches()))
        order = list(range(len(lengths)))
        draw.shuffle(order)
        shuffled.append(padding_ratio(lengths, [order[i : i + BATCH] for i in range(0, 1000, 32)]))
    assert min(shuffled) > 2.0  # random batches: 2.5x their real tokens
    assert max(grouped) < 1.35  # grouped in chunks of 7 batches: 1.26x
    assert max(grouped) < min(shuffled) / 1.8


class Recorder(pl.LightningModule):
    """Trains nothing of note; keeps the positions of every batch it is handed, per epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: dict[int, list[list[int]]] = {}

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen.setdefault(self.current_epoch, []).append(batch[0].tolist())
        return self.weight.square().sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_lightning_reads_each_epochs_own_batches() -> None:
    """Lightning calls `set_epoch` before each epoch: epoch 2 is not epoch 1 read again."""
    lengths = sentence_lengths(300)
    groups = LengthGroups(lengths, BATCH, 5)
    loader = DataLoader(TensorDataset(torch.arange(len(lengths))), BATCH, sampler=groups)
    module = Recorder()
    steps = -(-len(lengths) // BATCH)
    quiet_trainer(2 * steps).fit(module, train_dataloaders=loader)
    for epoch in (0, 1):
        groups.set_epoch(epoch)
        assert module.seen[epoch] == groups.batches()
    assert module.seen[0] != module.seen[1]
