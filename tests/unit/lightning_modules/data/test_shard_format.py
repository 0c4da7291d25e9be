from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lightning_modules.data.packed_dataset import PackedSequenceDataset
from lightning_modules.data.shard_format import (
    CorruptShardError,
    ShardIndex,
    ShardWriter,
    token_dtype,
    verify_shards,
)


def write_index(directory: Path, sequences: np.ndarray, per_shard: int) -> ShardIndex:
    writer = ShardWriter(directory, "train", 4, token_dtype(1000), per_shard)
    writer.add(sequences[:3])
    writer.add(sequences[3:])
    index = ShardIndex(4, 1000, "uint16", "tok", {"train": writer.close(), "validation": []})
    index.save(directory)
    return index


def test_round_trip_across_shard_boundaries(tmp_path: Path) -> None:
    sequences = np.arange(40).reshape(10, 4)
    index = write_index(tmp_path, sequences, per_shard=4)
    assert [info.sequences for info in index.splits["train"]] == [4, 4, 2]
    loaded = ShardIndex.load(tmp_path)
    verify_shards(tmp_path, loaded)
    dataset = PackedSequenceDataset(tmp_path, loaded, "train")
    assert len(dataset) == 10
    assert all(dataset[i].tolist() == sequences[i].tolist() for i in range(10))


def test_a_flipped_byte_is_reported_with_the_shard_name(tmp_path: Path) -> None:
    index = write_index(tmp_path, np.arange(40).reshape(10, 4), per_shard=4)
    shard = tmp_path / "train-00001.bin"
    data = bytearray(shard.read_bytes())
    data[3] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptShardError, match=r"train-00001\.bin fails its sha256 check"):
        verify_shards(tmp_path, index)


def test_vocabularies_beyond_uint16_use_int32() -> None:
    assert token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.int32
