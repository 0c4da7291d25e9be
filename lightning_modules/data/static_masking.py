"""Static masking (original BERT): every copy of a sequence keeps one mask for the whole run.

BERT wrote each sequence `duplication_factor` times with different masks into its TFRecords.
Here copy `c` of sequence `i` is item `c * n + i` of a dataset `copies` times the shards' size,
and its mask is drawn from a generator seeded by that item number: the same masks, every epoch
and after a resume, with no masks on disk, so the shards stay shared with dynamic-masking runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import Dataset

from lightning_modules.data.collator import MaskingCollator


class StaticCopies(Dataset[tuple[int, torch.Tensor]]):
    def __init__(self, sequences: Dataset[torch.Tensor], copies: int) -> None:
        self.sequences = sequences
        self.count = len(sequences)  # type: ignore[arg-type]
        self.copies = copies

    def __len__(self) -> int:
        return self.count * self.copies

    def __getitem__(self, position: int) -> tuple[int, torch.Tensor]:
        return position, self.sequences[position % self.count]


class StaticMaskCollator:
    """Masks each item with its own seeded generator; selection is the wrapped collator's."""

    def __init__(self, collator: MaskingCollator, seed: int) -> None:
        self.collator = collator
        self.seed = seed

    def __call__(self, items: Sequence[tuple[int, torch.Tensor]]) -> dict[str, torch.Tensor]:
        rows = [
            self.collator.mask(
                sequence[None].long(),
                torch.Generator().manual_seed(self.seed * 1_000_003 + position),
            )
            for position, sequence in items
        ]
        return {name: torch.cat([row[name] for row in rows]) for name in rows[0]}
