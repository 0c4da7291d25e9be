"""Exact mid-epoch resume: the data order, the mask draws and the dropout RNG continue unchanged.

Lightning restores the model, optimiser, scheduler and step counters, but a plain DataLoader
restarts its epoch from the first batch after a restart, repeating data and redrawing masks. Here
the sampler's order is a pure function of (seed, epoch) that can start mid-epoch, and a callback
checkpoints the position together with the collator's generator and torch's global RNG.
Exact for `num_workers=0`; with worker processes the order is exact but masks are redrawn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import Sampler

from lightning_modules.data.collator import MaskingCollator


class EpochShuffleSampler(Sampler[int]):
    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.seed = seed
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at every epoch start."""
        self.epoch = epoch

    def resume_at(self, epoch: int, start: int) -> None:
        self.epoch, self.start = epoch, start

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(self.size, generator=generator)[self.start :]
        self.start = 0
        return iter(order.tolist())

    def __len__(self) -> int:
        # The full epoch, even when resuming mid-way: Lightning keeps counting the restored
        # batch index against this length, and the shortened iterator ends the epoch itself.
        return self.size


class TrainingStreamState(pl.Callback):
    """Saves and restores where the training stream stands, inside Lightning's checkpoints."""

    def __init__(
        self, sampler: EpochShuffleSampler, collator: MaskingCollator, batch_size: int
    ) -> None:
        self.sampler = sampler
        self.collator = collator
        self.batch_size = batch_size
        self.epoch = 0
        self.batches_in_epoch = 0
        self.batches_total = 0
        self._resumed = False

    def on_train_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if self._resumed:
            self._resumed = False  # the restored position already belongs to this epoch
            return
        self.epoch, self.batches_in_epoch = trainer.current_epoch, 0

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self.batches_in_epoch += 1
        self.batches_total += 1

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "batches_in_epoch": self.batches_in_epoch,
            "batches_total": self.batches_total,
            "mask_generator": self.collator.generator_state_before(self.batches_total),
            "torch_rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epoch = state_dict["epoch"]
        self.batches_in_epoch = state_dict["batches_in_epoch"]
        self.batches_total = state_dict["batches_total"]
        self.sampler.resume_at(self.epoch, self.batches_in_epoch * self.batch_size)
        self.collator.resume_at(self.batches_total, state_dict["mask_generator"])
        torch.set_rng_state(state_dict["torch_rng"])
        self._resumed = True
