"""The packed shards (shard_format.py) as a torch Dataset: what training reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from lightning_modules.data.shard_format import ShardIndex


class PackedSequenceDataset(Dataset[torch.Tensor]):
    """Random access to the fixed-length sequences of one split, memory-mapped shard by shard."""

    def __init__(self, directory: Path, index: ShardIndex, split: str) -> None:
        infos = index.splits.get(split, [])
        self.seq_len = index.seq_len
        self.arrays = [
            np.memmap(directory / info.file, dtype=index.dtype, mode="r").reshape(-1, index.seq_len)
            for info in infos
        ]
        self.offsets = np.cumsum([0] + [len(array) for array in self.arrays])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, position: int) -> torch.Tensor:
        if not 0 <= position < len(self):
            raise IndexError(position)
        shard = int(np.searchsorted(self.offsets, position, side="right")) - 1
        row = self.arrays[shard][position - self.offsets[shard]]
        return torch.from_numpy(row.astype(np.int64))
