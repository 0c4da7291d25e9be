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
from dataclasses import dataclass
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
    dedupe_key,
    is_validation,
)
from flows.corpora.stats import CorpusStats

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


def encode_unit(job: UnitJob) -> UnitResult:
    """Reads, cleans and tokenizes one unit; reuses the result a previous attempt finished."""
    final = job.output
    if (final / RESULT_FILE).is_file():
        return UnitResult.load(final)
    partial = final.with_name(f"{final.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    tokenizer = Tokenizer.from_file(job.tokenizer_file)
    dtype = np.dtype(job.token_dtype)
    stats = CorpusStats()
    columns: dict[str, list[Any]] = {name: [] for name in ARRAYS}
    fraction = job.corpus.validation_fraction
    tokens = 0
    with (partial / TOKENS_FILE).open("wb") as token_file:
        for batch in batched(cleaned_documents(job.unit, job.corpus, stats), job.batch_documents):
            encodings = tokenizer.encode_batch(batch, add_special_tokens=False)
            ids = [encoding.ids for encoding in encodings]
            lengths = [len(row) for row in ids]
            flat = np.fromiter(chain.from_iterable(ids), dtype=dtype, count=sum(lengths))
            token_file.write(flat.tobytes())
            tokens += len(flat)
            columns["lengths"] += lengths
            columns["keys"] += [dedupe_key(text) for text in batch]
            columns["validation"] += [is_validation(text, fraction) for text in batch]
    np.save(partial / "lengths.npy", np.asarray(columns["lengths"], dtype=np.int64))
    np.save(partial / "keys.npy", np.asarray(columns["keys"], dtype=np.uint64))
    np.save(partial / "validation.npy", np.asarray(columns["validation"], dtype=bool))
    stats.documents = len(columns["lengths"])
    record = {
        "name": job.unit.name,
        "documents": stats.documents,
        "tokens": tokens,
        "dtype": dtype.name,
        "stats": stats.as_dict(),
    }
    (partial / RESULT_FILE).write_text(json.dumps(record))
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    return UnitResult.load(final)
