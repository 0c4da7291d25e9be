"""Concat packing: documents joined with [SEP] and cut into fixed-length blocks led by [CLS].

Packing wastes no compute on padding (Cramming, run_mlm's group_texts). Work is done on numpy
arrays per tokenized batch, never per token in Python.
"""

from __future__ import annotations

import numpy as np


class SequencePacker:
    def __init__(self, seq_len: int, cls_id: int, sep_id: int) -> None:
        if seq_len < 8:
            raise ValueError(f"shards.seq_len={seq_len} is too short (min 8)")
        self.seq_len = seq_len
        self.body = seq_len - 1
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.carry = np.empty(0, dtype=np.int64)

    def add(self, documents: list[list[int]]) -> np.ndarray:
        """Appends tokenized documents; returns the (n, seq_len) blocks completed by them."""
        pieces = [self.carry]
        for ids in documents:
            pieces.append(np.asarray(ids, dtype=np.int64))
            pieces.append(np.array([self.sep_id], dtype=np.int64))
        stream = np.concatenate(pieces)
        full = len(stream) // self.body
        self.carry = stream[full * self.body :].copy()
        blocks = stream[: full * self.body].reshape(full, self.body)
        return np.concatenate([np.full((full, 1), self.cls_id, dtype=np.int64), blocks], axis=1)

    @property
    def leftover_tokens(self) -> int:
        """Tokens of the final partial block, dropped rather than padded."""
        return len(self.carry)
