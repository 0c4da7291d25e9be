"""Stage 2: stream the corpus, tokenize in batches, pack, and write checksummed token shards."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.corpora import Corpus
from flows.corpora.base import batched, is_validation
from flows.packing import SequencePacker
from flows.settings import ConfigError, output_settings
from flows.stages.tokenizer import load_tokenizer
from lightning_modules.data.shard_format import (
    SPLITS,
    ShardIndex,
    ShardWriter,
    token_dtype,
    verify_shards,
)

STAGE = "shards"
VERSION = 1


@dataclass(frozen=True)
class ShardSettings:
    """`shards.*`; `batch_documents` only trades memory for speed, so it stays out of the key."""

    seq_len: int = 128
    sequences_per_shard: int = 8192
    batch_documents: int = 512

    def __post_init__(self) -> None:
        if not 8 <= self.seq_len <= 8192:
            raise ConfigError(f"shards.seq_len={self.seq_len} must be between 8 and 8192")
        if self.sequences_per_shard < 1 or self.batch_documents < 1:
            raise ConfigError("shards.sequences_per_shard and shards.batch_documents must be >= 1")


def build_shards(
    settings: ShardSettings, corpus: Corpus, tokenizer_ref: ArtifactRef, store: ArtifactStore
) -> ArtifactRef:
    record: dict[str, Any] = {
        "settings": output_settings(settings, exclude=("batch_documents",)),
        "inputs": {"tokenizer": tokenizer_ref.key, "corpus": corpus.fingerprint()},
    }
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])

    def build(directory: Path) -> dict[str, Any]:
        trained = load_tokenizer(tokenizer_ref)
        dtype = token_dtype(trained.vocab_size)
        packers = {
            split: SequencePacker(settings.seq_len, trained.special.cls, trained.special.sep)
            for split in SPLITS
        }
        writers = {
            split: ShardWriter(
                directory, split, settings.seq_len, dtype, settings.sequences_per_shard
            )
            for split in SPLITS
        }
        documents = dict.fromkeys(SPLITS, 0)
        tokens = dict.fromkeys(SPLITS, 0)
        fraction = corpus.settings.validation_fraction
        for batch in batched(corpus.documents(), settings.batch_documents):
            encodings = trained.tokenizer.encode_batch(batch, add_special_tokens=False)
            grouped: dict[str, list[list[int]]] = {split: [] for split in SPLITS}
            for text, encoding in zip(batch, encodings, strict=True):
                split = "validation" if is_validation(text, fraction) else "train"
                grouped[split].append(encoding.ids)
                tokens[split] += len(encoding.ids)
            for split, ids in grouped.items():
                documents[split] += len(ids)
                writers[split].add(packers[split].add(ids))
        if documents["train"] == 0:
            raise ValueError("the corpus is empty after cleaning: nothing to shard")
        index = ShardIndex(
            settings.seq_len,
            trained.vocab_size,
            dtype.name,
            tokenizer_ref.key,
            {split: writer.close() for split, writer in writers.items()},
        )
        index.save(directory)
        return {
            **{
                f"{split}_{name}": value
                for split in SPLITS
                for name, value in (
                    ("documents", documents[split]),
                    ("tokens", tokens[split]),
                    ("sequences", index.sequences(split)),
                    ("shards", len(index.splits[split])),
                    ("dropped_tail_tokens", packers[split].leftover_tokens),
                )
            },
            "duplicates_dropped": corpus.stats.dropped_duplicate,
            "short_documents_dropped": corpus.stats.dropped_short,
            "seq_len": settings.seq_len,
            "dtype": dtype.name,
        }

    def validate(ref: ArtifactRef) -> None:
        verify_shards(ref.path, ShardIndex.load(ref.path))

    return store.get_or_build(STAGE, key, build, record, validate=validate)
