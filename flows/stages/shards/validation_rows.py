"""Held-out text as fixed validation rows: tokenized by the run's tokenizer and packed as its
shards are (same row length, same packing), stored as a shard set holding one split.

Its own content-addressed piece (`general_validation/<key>`): the rows depend on the text, the
tokenizer and the row shape only, so every run that shares those reuses them, and the pretrain
stage's key holds this key rather than the files' paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.core.outputs import StageOutputs
from flows.corpora import Corpus
from flows.corpora.base import batched
from flows.corpora.formats import CorpusInputError
from flows.stages.shards.packing import make_packer
from flows.stages.tokenizer import load_tokenizer
from lightning_modules.data.shard_format import ShardIndex, ShardWriter, token_dtype

STAGE = "general_validation"
VERSION = 1
SPLIT = "validation"
BATCH_DOCUMENTS = 256


@dataclass(frozen=True)
class ValidationRowsOutputs(StageOutputs):
    """How much text the rows hold."""

    STAGE = STAGE
    documents: int  # documents read (the last batch may fill the rows only in part)
    tokens: int
    sequences: int
    seq_len: int


def build_validation_rows(
    corpus: Corpus,
    tokenizer_ref: ArtifactRef,
    seq_len: int,
    packing: str,
    max_rows: int,
    store: ArtifactStore,
    key_name: str,
) -> ArtifactRef:
    """The first `max_rows` rows of `corpus` (reading stops there); `key_name` is the setting
    that named the text, for the error when it is too short to fill one row."""
    record: dict[str, Any] = {
        "settings": {"seq_len": seq_len, "packing": packing, "max_rows": max_rows},
        "inputs": {"tokenizer": tokenizer_ref.key, "text": corpus.fingerprint()},
    }
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])

    def build(directory: Path) -> dict[str, Any]:
        trained = load_tokenizer(tokenizer_ref)
        special, dtype = trained.special, token_dtype(trained.vocab_size)
        packer = make_packer(packing, seq_len, special.cls, special.sep, special.pad)
        padding = special.pad if packing == "document" else None
        writer = ShardWriter(directory, SPLIT, seq_len, dtype, max_rows, padding)
        rows = documents = tokens = 0
        for batch in batched(corpus.documents(), BATCH_DOCUMENTS):
            encodings = trained.tokenizer.encode_batch_fast(batch, add_special_tokens=False)
            ids = [encoding.ids for encoding in encodings]
            lengths = np.array([len(row) for row in ids], dtype=np.int64)
            flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
            packed = packer.add(flat, lengths)[: max_rows - rows]
            writer.add(packed)
            rows, documents, tokens = rows + len(packed), documents + len(batch), tokens + len(flat)
            if rows >= max_rows:
                break
        if rows == 0:
            raise CorpusInputError(
                f"{key_name}: {', '.join(corpus.settings.paths)} gives no full row of "
                f"{seq_len} tokens ({tokens} tokens in all); add text"
            )
        index = ShardIndex(
            seq_len,
            trained.vocab_size,
            dtype.name,
            tokenizer_ref.key,
            {SPLIT: writer.close()},
            packing=packing,
            pad_id=special.pad,
        )
        index.save(directory)
        return ValidationRowsOutputs(documents, tokens, rows, seq_len).to_manifest()

    def validate(ref: ArtifactRef) -> None:
        ShardIndex.load(ref.path)  # the bytes were verified against the manifest's checksums

    return store.get_or_build(STAGE, key, build, record, validate=validate)
