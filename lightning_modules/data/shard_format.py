"""On-disk format of packed token shards: flat fixed-width token arrays plus a JSON index.

Shards are read by memmap, so training never tokenizes and never holds a corpus in memory.
Every shard carries a sha256 in the index; readers verify it before training so a flipped byte
fails loudly instead of silently training on garbage. Written without torch (the shards stage
needs none); training reads the shards through mlm_datamodule.py's `PackedSequenceDataset`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

INDEX_FILE = "shards.json"
SPLITS = ("train", "validation")


class CorruptShardError(RuntimeError):
    """A shard is missing or does not match the checksum recorded when it was written."""


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 halves disk and page-cache traffic whenever the vocabulary fits in it."""
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.int32)


@dataclass(frozen=True)
class ShardInfo:
    file: str
    sequences: int
    sha256: str
    tokens: int = 0  # real (non-padding) tokens


@dataclass
class ShardIndex:
    seq_len: int
    vocab_size: int
    dtype: str
    tokenizer_key: str
    splits: dict[str, list[ShardInfo]] = field(default_factory=dict)
    packing: str = "concat"
    pad_id: int = 0

    def sequences(self, split: str) -> int:
        return sum(info.sequences for info in self.splits.get(split, []))

    def save(self, directory: Path) -> None:
        (directory / INDEX_FILE).write_text(json.dumps(asdict(self), indent=2, sort_keys=True))

    @classmethod
    def load(cls, directory: Path) -> ShardIndex:
        path = directory / INDEX_FILE
        check_plain_file(path)
        if not path.is_file():
            raise CorruptShardError(f"{path} is missing: {directory} is not a complete shard set")
        try:
            raw = json.loads(path.read_text())
            splits = {
                name: [ShardInfo(**info) for info in infos]
                for name, infos in raw.pop("splits").items()
            }
            index = cls(splits=splits, **raw)
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise CorruptShardError(f"{path} does not parse as a shard index ({error})") from error
        for infos in index.splits.values():
            for info in infos:
                check_shard_name(info.file, path)
        return index


def check_shard_name(name: object, index_path: Path) -> None:
    """A shard is a plain file beside its index: "../x" would make a reader leave the store."""
    if not isinstance(name, str) or name in {"", ".", ".."} or Path(name).name != name:
        raise CorruptShardError(
            f"{index_path} names shard file {name!r}, which is not a plain file name beside the "
            "index and could point outside the artifact store; refused"
        )


def check_plain_file(path: Path) -> None:
    """A shard set's files are its own: a symbolic link (even to an identical copy) would make
    training read, and trust, a file outside the store."""
    if path.is_symlink():
        raise CorruptShardError(
            f"{path} is a symbolic link; a shard set reads only its own files: refused. Rerun "
            "the pipeline: the shards stage quarantines this shard set and rebuilds it."
        )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_shards(directory: Path, index: ShardIndex) -> None:
    """Raises CorruptShardError naming the first shard whose bytes changed since it was written."""
    for infos in index.splits.values():
        for info in infos:
            path = directory / info.file
            check_plain_file(path)
            if not path.is_file():
                raise CorruptShardError(f"shard {path} is missing; rerun to rebuild the shard set")
            actual = file_sha256(path)
            if actual != info.sha256:
                raise CorruptShardError(
                    f"shard {path} fails its sha256 check (recorded {info.sha256[:12]}, "
                    f"found {actual[:12]}): the file was modified or truncated after it was "
                    "written. Rerun the pipeline: the shards stage quarantines this shard set "
                    "and rebuilds it."
                )


class ShardWriter:
    """Buffers packed sequences of one split and writes them as shards of a fixed size."""

    def __init__(
        self,
        directory: Path,
        split: str,
        seq_len: int,
        dtype: np.dtype,
        sequences_per_shard: int,
        pad_id: int | None = None,
    ) -> None:
        self.directory = directory
        self.pad_id = pad_id
        self.split = split
        self.seq_len = seq_len
        self.dtype = dtype
        self.sequences_per_shard = sequences_per_shard
        self.pending: list[np.ndarray] = []
        self.pending_sequences = 0
        self.written: list[ShardInfo] = []

    def add(self, sequences: np.ndarray) -> None:
        if len(sequences) == 0:
            return
        self.pending.append(sequences.astype(self.dtype, copy=False))
        self.pending_sequences += len(sequences)
        while self.pending_sequences >= self.sequences_per_shard:
            block = np.concatenate(self.pending)
            self._write(block[: self.sequences_per_shard])
            rest = block[self.sequences_per_shard :]
            self.pending = [rest] if len(rest) else []
            self.pending_sequences = len(rest)

    def close(self) -> list[ShardInfo]:
        if self.pending_sequences:
            self._write(np.concatenate(self.pending))
        self.pending, self.pending_sequences = [], 0
        return self.written

    def _write(self, block: np.ndarray) -> None:
        name = f"{self.split}-{len(self.written):05d}.bin"
        data = np.ascontiguousarray(block).tobytes()
        (self.directory / name).write_bytes(data)
        tokens = block.size if self.pad_id is None else int(np.count_nonzero(block != self.pad_id))
        self.written.append(ShardInfo(name, len(block), hashlib.sha256(data).hexdigest(), tokens))
