"""Sharding, part one: a unit of the corpus (a file) read, cleaned and tokenized on its own.

Units are independent, so they run in parallel on processes or a Dask cluster. Each writes its
token ids, document lengths, dedupe keys and split flags to disk; the merge that follows
dedupes and packs them in unit order, which makes the shards byte-identical whatever the worker
count. A finished unit is kept on disk, so a killed run redoes only the units it had not finished.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from flows.corpora.base import (
    CorpusSettings,
    SourceUnit,
    batched,
    cleaned_documents,
)
from flows.corpora.cleaning import document_identity
from flows.corpora.excluded import ExcludedTexts
from flows.corpora.stats import CorpusStats
from flows.stages.shards.prefetch import prefetched

RESULT_FILE = "result.json"
TOKENS_FILE = "tokens.bin"
ARRAYS = ("lengths", "keys", "validation")


@dataclass(frozen=True)
class UnitJob:
    """Everything a worker needs, picklable: no open files, no tokenizer object."""

    index: int
    unit: SourceUnit
    corpus: CorpusSettings
    tokenizer_file: str
    token_dtype: str
    batch_documents: int
    directory: str
    excluded: ExcludedTexts | None = None

    @property
    def output(self) -> Path:
        return Path(self.directory) / f"unit-{self.index:06d}"


@dataclass(frozen=True)
class UnitResult:
    directory: Path
    name: str
    documents: int
    tokens: int
    dtype: str
    stats: CorpusStats

    def array(self, name: str) -> np.ndarray:
        return np.load(self.directory / f"{name}.npy")

    def token_ids(self) -> np.ndarray:
        if not self.tokens:
            return np.empty(0, dtype=self.dtype)
        return np.memmap(self.directory / TOKENS_FILE, dtype=self.dtype, mode="r")

    @classmethod
    def load(cls, directory: Path) -> UnitResult:
        raw: dict[str, Any] = json.loads((directory / RESULT_FILE).read_text())
        return cls(
            directory,
            raw["name"],
            raw["documents"],
            raw["tokens"],
            raw["dtype"],
            CorpusStats(**raw["stats"]),
        )


Batch = tuple[list[str], list[tuple[int, bool]]]


def unit_batches(jobs: list[UnitJob]) -> Iterator[tuple[UnitJob, CorpusStats, Batch | None]]:
    """Every unit's cleaned documents in batches, with dedupe keys and splits; None ends a unit.

    This is the Python-side work; run ahead in a thread, it reads the next unit while the
    current one is still being encoded.
    """
    for job in jobs:
        stats = CorpusStats()
        fraction = job.corpus.validation_fraction
        documents = cleaned_documents(job.unit, job.corpus, stats, job.excluded)
        for batch in batched(documents, job.batch_documents):
            yield job, stats, (batch, [document_identity(text, fraction) for text in batch])
        yield job, stats, None


@lru_cache(maxsize=4)
def load_tokenizer_file(path: str) -> Tokenizer:
    return Tokenizer.from_file(path)


class UnitWriter:
    """One unit's output, written into a private directory and renamed into place when done."""

    def __init__(self, job: UnitJob) -> None:
        self.final = job.output
        self.partial = self.final.with_name(f"{self.final.name}.partial-{os.getpid()}")
        shutil.rmtree(self.partial, ignore_errors=True)
        self.partial.mkdir(parents=True)
        self.name = job.unit.name
        self.dtype = np.dtype(job.token_dtype)
        self.token_file = (self.partial / TOKENS_FILE).open("wb")
        self.tokens = 0
        self.columns: dict[str, list[Any]] = {name: [] for name in ARRAYS}

    def add(self, ids: list[list[int]], identities: list[tuple[int, bool]]) -> None:
        lengths = [len(row) for row in ids]
        flat = np.fromiter(chain.from_iterable(ids), dtype=self.dtype, count=sum(lengths))
        self.token_file.write(flat.tobytes())
        self.tokens += len(flat)
        self.columns["lengths"] += lengths
        self.columns["keys"] += [key for key, _ in identities]
        self.columns["validation"] += [validation for _, validation in identities]

    def finish(self, stats: CorpusStats) -> UnitResult:
        self.token_file.close()
        np.save(self.partial / "lengths.npy", np.asarray(self.columns["lengths"], dtype=np.int64))
        np.save(self.partial / "keys.npy", np.asarray(self.columns["keys"], dtype=np.uint64))
        np.save(self.partial / "validation.npy", np.asarray(self.columns["validation"], bool))
        stats.documents = len(self.columns["lengths"])
        record = {
            "name": self.name,
            "documents": stats.documents,
            "tokens": self.tokens,
            "dtype": self.dtype.name,
            "stats": stats.as_dict(),
        }
        (self.partial / RESULT_FILE).write_text(json.dumps(record))
        shutil.rmtree(self.final, ignore_errors=True)
        self.partial.rename(self.final)
        return UnitResult.load(self.final)


def encode_units(jobs: list[UnitJob]) -> list[UnitResult]:
    """Reads, cleans and tokenizes units in order; reuses any unit a previous attempt finished."""
    results = {
        job.index: UnitResult.load(job.output)
        for job in jobs
        if (job.output / RESULT_FILE).is_file()
    }
    todo = [job for job in jobs if job.index not in results]
    writer: UnitWriter | None = None
    for job, stats, batch in prefetched(unit_batches(todo)):
        writer = writer or UnitWriter(job)
        if batch is None:
            results[job.index] = writer.finish(stats)
            writer = None
            continue
        texts, identities = batch
        # Only ids are kept: the fast variant skips the character offsets (measured in
        # benchmarks/shard_throughput.py).
        encodings = load_tokenizer_file(job.tokenizer_file).encode_batch_fast(
            texts, add_special_tokens=False
        )
        writer.add([encoding.ids for encoding in encodings], identities)
    return [results[job.index] for job in jobs]


def encode_unit(job: UnitJob) -> UnitResult:
    """One unit: the piece of work a process or Dask worker runs."""
    return encode_units([job])[0]
