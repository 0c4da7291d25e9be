"""Splitting the global batch over ranks so that N processes train exactly as one process would.

Every rank iterates the same sampler (one seeded order per epoch) with the *global* batch size,
masks the whole global batch with the same collator generator, and keeps only its contiguous
block of rows. So, across ranks, every sequence of an epoch is trained on exactly once; the masks
are the ones a single process would draw; and the stream state in a checkpoint (sampler position,
mask generator) is the same on every rank, which keeps exact resume working on any world size.
The cost is that each rank reads and masks the global batch: cheap beside the model's step.

A per-rank mean loss would weight the ranks' masked tokens unequally; `loss_weight` rescales each
rank's mean so that DDP's gradient average equals the single-process mean over the global batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import Sampler

from lightning_modules.models.config import IGNORE_INDEX

LOSS_WEIGHT = "loss_weight"


def rank_rows(batch_size: int, rank: int, world_size: int) -> slice:
    """The rows of a global batch that belong to `rank`: one contiguous block each."""
    if batch_size % world_size:
        raise ValueError(
            f"trainer.batch_size={batch_size} must be a multiple of the {world_size} processes"
        )
    per_rank = batch_size // world_size
    return slice(rank * per_rank, (rank + 1) * per_rank)


class RankSlice:
    """Collates the global batch, keeps this rank's rows; a class, so workers can pickle it."""

    def __init__(
        self, collate: Callable[[list[Any]], dict[str, torch.Tensor]], rank: int, world_size: int
    ) -> None:
        self.collate = collate
        self.rank = rank
        self.world_size = world_size

    def __call__(self, items: list[Any]) -> dict[str, torch.Tensor]:
        batch = self.collate(items)
        rows = rank_rows(len(items), self.rank, self.world_size)
        mine = {name: tensor[rows] for name, tensor in batch.items()}
        targets = int((batch["labels"] != IGNORE_INDEX).sum())
        own_targets = int((mine["labels"] != IGNORE_INDEX).sum())
        mine[LOSS_WEIGHT] = torch.tensor(own_targets * self.world_size / max(targets, 1))
        return mine


class StridedPartition(Sampler[int]):
    """Rank r evaluates items r, r + W, r + 2W, ...: each item once, no padding duplicates."""

    def __init__(self, size: int, rank: int, world_size: int) -> None:
        self.size = size
        self.rank = rank
        self.world_size = world_size

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.size, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.size, self.world_size))


def sum_over_ranks(tensor: torch.Tensor) -> torch.Tensor:
    """Element-wise sum across the process group (identity in a single process)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return tensor
    if torch.distributed.get_world_size() == 1:
        return tensor
    backend = torch.distributed.get_backend()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else None
    reduced = tensor.to(device) if device is not None else tensor.clone()
    torch.distributed.all_reduce(reduced, op=torch.distributed.ReduceOp.SUM)
    return reduced.to(tensor.device)
