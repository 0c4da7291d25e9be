"""Packing tokenized documents into fixed-length sequences, on numpy arrays, never per token.

`concat` joins documents with [SEP] and cuts the stream into blocks led by [CLS]: no compute is
spent on padding (Cramming, run_mlm's group_texts). `document` gives each document its own
sequence, truncated and padded: attention never crosses documents, at the cost of padding.
"""

from __future__ import annotations

import numpy as np

PACKING_MODES = ("concat", "document")


class ConcatPacker:
    def __init__(self, seq_len: int, cls_id: int, sep_id: int) -> None:
        if seq_len < 8:
            raise ValueError(f"shards.seq_len={seq_len} is too short (min 8)")
        self.seq_len = seq_len
        self.body = seq_len - 1
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.carry = np.empty(0, dtype=np.int64)

    def add(self, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Appends documents (their ids back to back); returns the (n, seq_len) blocks completed."""
        ends = np.cumsum(lengths)
        stream = np.concatenate([self.carry, np.insert(tokens.astype(np.int64), ends, self.sep_id)])
        full = len(stream) // self.body
        self.carry = stream[full * self.body :].copy()
        blocks = stream[: full * self.body].reshape(full, self.body)
        return np.concatenate([np.full((full, 1), self.cls_id, dtype=np.int64), blocks], axis=1)

    def held(self, lengths: np.ndarray) -> np.ndarray:
        """The tokens of each document that rows hold: all (only the final partial row is cut)."""
        return lengths

    @property
    def dropped_tokens(self) -> int:
        """Tokens of the final partial block, dropped rather than padded."""
        return len(self.carry)


class DocumentPacker:
    def __init__(self, seq_len: int, cls_id: int, sep_id: int, pad_id: int) -> None:
        if seq_len < 8:
            raise ValueError(f"shards.seq_len={seq_len} is too short (min 8)")
        self.seq_len = seq_len
        self.cls_id, self.sep_id, self.pad_id = cls_id, sep_id, pad_id
        self.dropped_tokens = 0

    def held(self, lengths: np.ndarray) -> np.ndarray:
        """The tokens of each document that its row holds: at most seq_len - 2."""
        return np.minimum(lengths, self.seq_len - 2)

    def add(self, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """One row per document: [CLS] ids [SEP] [PAD]...; ids past seq_len - 2 are cut."""
        kept = self.held(lengths)
        self.dropped_tokens += int(lengths.sum() - kept.sum())
        rows = np.full((len(lengths), self.seq_len), self.pad_id, dtype=np.int64)
        rows[:, 0] = self.cls_id
        row_of_token = np.repeat(np.arange(len(lengths)), kept)
        offset_in_row = np.arange(int(kept.sum())) - np.repeat(np.cumsum(kept) - kept, kept)
        source = np.repeat(np.cumsum(lengths) - lengths, kept) + offset_in_row
        rows[row_of_token, offset_in_row + 1] = tokens[source]
        rows[np.arange(len(lengths)), kept + 1] = self.sep_id
        return rows


def make_packer(
    mode: str, seq_len: int, cls_id: int, sep_id: int, pad_id: int
) -> ConcatPacker | DocumentPacker:
    if mode == "document":
        return DocumentPacker(seq_len, cls_id, sep_id, pad_id)
    return ConcatPacker(seq_len, cls_id, sep_id)
