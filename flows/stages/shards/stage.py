"""Stage 2: the corpus as checksummed shards of packed token sequences.

Two parts. Units of the corpus (files) are read, cleaned and tokenized independently and in
parallel (`shard_units.py`, mapped by whatever runs them: local processes or a Dask cluster).
Then one merge walks the units in order, drops duplicates, splits train from validation, packs
and writes the shards. The merge is numpy copies only, so it is cheap, and doing it in unit order
is what makes the shards byte-identical whatever the number of workers.
"""

from __future__ import annotations

import multiprocessing
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, fields
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.core.outputs import StageOutputs
from flows.core.settings import Settings, bounds, one_of, output_settings
from flows.corpora import Corpus
from flows.corpora.base import SourceUnit, empty_corpus_error
from flows.corpora.formats import CorpusInputError
from flows.corpora.stats import CorpusStats
from flows.stages.shards.packing import (
    PACKING_MODES,
    ConcatPacker,
    DocumentPacker,
    make_packer,
)
from flows.stages.shards.replay import choose_replay
from flows.stages.shards.units import UnitJob, UnitResult, encode_unit, encode_units
from flows.stages.tokenizer import TOKENIZER_FILE, load_tokenizer
from lightning_modules.data.shard_format import (
    SPLITS,
    ShardIndex,
    ShardWriter,
    token_dtype,
)

STAGE = "shards"
VERSION = 2
MERGE_CHUNK_TOKENS = 1 << 23
EXECUTORS = ("local", "dask")
UnitMapper = Callable[[list[UnitJob]], list[UnitResult]]


class ShardSettings(Settings):
    """`shards.*`; how the work is spread (workers, executor) never changes the shards' bytes."""

    section = "shards"
    seq_len: Annotated[int, bounds(ge=8, le=8192)] = 128
    """Tokens per training sequence."""
    packing: Annotated[str, one_of(PACKING_MODES)] = "concat"
    """concat: documents joined by [SEP], no padding | document: one per sequence."""
    sequences_per_shard: Annotated[int, bounds(ge=1)] = 8192
    """Sequences per shard file."""
    batch_documents: Annotated[int, bounds(ge=1)] = 512
    """Documents tokenized per batch (out of the key)."""
    num_workers: Annotated[int, bounds(ge=1)] = 1
    """Processes reading and tokenizing files (out of the key)."""
    executor: Annotated[str, one_of(EXECUTORS)] = "local"
    """local (processes) | dask (out of the key)."""
    dask_address: str | None = None
    """A Dask scheduler (tcp://host:8786); null with executor=dask starts a LocalCluster."""


NOT_IN_KEY = ("batch_documents", "num_workers", "executor", "dask_address")


@dataclass(frozen=True)
class ShardOutputs(StageOutputs):
    """What the shards hold per split, and what reading the corpus kept and dropped.

    The manifest keeps the corpus counts flat, as `corpus_<count>`. The train counts are of both
    sources; the `train_domain_*`/`train_replay_*` tokens are those the rows hold (after
    `document` packing's truncation), per source: what `corpus.replay.share` is a share of.
    """

    STAGE = STAGE
    train_documents: int
    validation_documents: int
    train_tokens: int
    validation_tokens: int
    train_sequences: int
    validation_sequences: int
    train_shards: int
    validation_shards: int
    train_dropped_tokens: int  # cut by packing (the tail of a document past a sequence)
    validation_dropped_tokens: int
    corpus: CorpusStats
    units: int
    seq_len: int
    dtype: str
    train_domain_tokens: int = 0
    train_replay_tokens: int = 0
    train_replay_documents: int = 0
    replay_available_tokens: int = 0  # what the replay files offered after cleaning and dedupe

    @property
    def replay_share(self) -> float:
        """The replay's measured share of the training rows' tokens (0 without replay)."""
        total = self.train_domain_tokens + self.train_replay_tokens
        return self.train_replay_tokens / total if total else 0.0

    def to_manifest(self) -> dict[str, Any]:
        outputs = {item.name: getattr(self, item.name) for item in fields(self)}
        corpus = outputs.pop("corpus").as_dict()
        return {**outputs, **{f"corpus_{name}": value for name, value in corpus.items()}}

    @classmethod
    def from_manifest(cls, outputs: Mapping[str, Any]) -> ShardOutputs:
        # A count added later reads 0 from a manifest written before it existed.
        counts = {item.name: outputs.get(f"corpus_{item.name}", 0) for item in fields(CorpusStats)}
        return super().from_manifest({**outputs, "corpus": CorpusStats(**counts)})


@dataclass
class ReplayCounts:
    """What the replay added to the training rows (all 0 without replay)."""

    documents: int = 0
    tokens: int = 0  # the documents' tokens
    held_tokens: int = 0  # those the rows hold
    dropped_tokens: int = 0  # cut by packing
    available_tokens: int = 0


def map_in_processes(num_workers: int) -> UnitMapper:
    """Runs units in a local process pool (spawned: no forked tokenizer thread pools)."""

    def run(jobs: list[UnitJob]) -> list[UnitResult]:
        if num_workers == 1 or len(jobs) == 1:
            return encode_units(jobs)
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(num_workers, len(jobs)), mp_context=context) as pool:
            return list(pool.map(encode_unit, jobs))

    return run


class SeenKeys:
    """Dedupe keys seen so far, as sorted runs merged when they grow alike (a log-structured set).

    Eight bytes per kept document, and each unit's lookups cost a binary search per run; a
    Python set would take about eight times the memory on a corpus of tens of millions.
    """

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []

    def first_occurrences(self, keys: np.ndarray) -> np.ndarray:
        """Marks each key that neither an earlier unit nor an earlier position here had."""
        keep = np.zeros(len(keys), dtype=bool)
        keep[np.unique(keys, return_index=True)[1]] = True
        for run in self.runs:
            found = np.searchsorted(run, keys).clip(max=len(run) - 1)
            keep &= run[found] != keys
        new = np.sort(keys[keep])
        while self.runs and len(self.runs[-1]) <= 2 * len(new):
            new = np.sort(np.concatenate([self.runs.pop(), new]), kind="stable")
        if len(new):
            self.runs.append(new)
        return keep


def shards_record(
    settings: ShardSettings,
    tokenizer_key: str,
    corpus: dict[str, Any],
    replay: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the shards' artifact key is made of; worker counts and executors stay out, and so
    does `corpus.replay` while unset (a key from before it existed stays as it was)."""
    inputs = {"tokenizer": tokenizer_key, "corpus": corpus}
    return {
        "settings": output_settings(settings, exclude=NOT_IN_KEY),
        "inputs": inputs if replay is None else {**inputs, "replay": replay},
    }


def build_shards(
    settings: ShardSettings,
    corpus: Corpus,
    tokenizer_ref: ArtifactRef,
    store: ArtifactStore,
    map_units: UnitMapper | None = None,
) -> ArtifactRef:
    replay = corpus.replay
    record = shards_record(
        settings,
        tokenizer_ref.key,
        corpus.fingerprint(),
        None if replay is None else replay.fingerprint(),
    )
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])
    run_units = map_units or map_in_processes(settings.num_workers)

    def build(directory: Path) -> dict[str, Any]:
        trained = load_tokenizer(tokenizer_ref)
        dtype = token_dtype(trained.vocab_size)

        def unit_jobs(units: Sequence[SourceUnit], folder: str) -> list[UnitJob]:
            return [
                UnitJob(
                    index,
                    unit,
                    corpus.settings,
                    str(tokenizer_ref.path / TOKENIZER_FILE),
                    dtype.name,
                    settings.batch_documents,
                    str(store.work_dir(STAGE, key) / folder),
                    corpus.excluded,
                )
                for index, unit in enumerate(units)
            ]

        jobs = unit_jobs(corpus.units(), "units")
        special = trained.special

        def packer() -> ConcatPacker | DocumentPacker:
            return make_packer(
                settings.packing, settings.seq_len, special.cls, special.sep, special.pad
            )

        packers = {split: packer() for split in SPLITS}
        padding = special.pad if settings.packing == "document" else None
        writers = {
            split: ShardWriter(
                directory, split, settings.seq_len, dtype, settings.sequences_per_shard, padding
            )
            for split in SPLITS
        }
        counts = {f"{split}_{name}": 0 for split in SPLITS for name in ("documents", "tokens")}
        domain_tokens = 0  # held by the training rows: what the replay's share is taken beside
        stats = CorpusStats()
        seen = SeenKeys()
        for result in run_units(jobs):
            stats.add(result.stats)
            keep = seen.first_occurrences(result.array("keys"))
            stats.dropped_duplicate += int((~keep).sum())
            keep = cap_documents(keep, counts, corpus.settings.max_documents)
            lengths = result.array("lengths")
            validation = result.array("validation")
            for split in SPLITS:
                chosen = keep & (validation == (split == "validation"))
                counts[f"{split}_documents"] += int(chosen.sum())
                counts[f"{split}_tokens"] += int(lengths[chosen].sum())
                if split == "train":
                    domain_tokens += int(packers[split].held(lengths[chosen]).sum())
                for tokens, chunk_lengths in chosen_documents(result, lengths, chosen):
                    writers[split].add(packers[split].add(tokens, chunk_lengths))
        stats.documents = counts["train_documents"] + counts["validation_documents"]
        if counts["train_documents"] == 0:
            raise empty_corpus_error(corpus, stats)
        replayed = ReplayCounts()
        if replay is not None:  # rows of their own after the corpus's, which stay as they were
            replayed = pack_replay(
                replay.share,
                run_units(unit_jobs(replay.units(), "replay-units")),
                seen,
                domain_tokens,
                packer(),
                writers["train"],
            )
        index = ShardIndex(
            settings.seq_len,
            trained.vocab_size,
            dtype.name,
            tokenizer_ref.key,
            {split: writer.close() for split, writer in writers.items()},
            packing=settings.packing,
            pad_id=special.pad,
        )
        index.save(directory)
        return ShardOutputs(
            train_documents=counts["train_documents"] + replayed.documents,
            validation_documents=counts["validation_documents"],
            train_tokens=counts["train_tokens"] + replayed.tokens,
            validation_tokens=counts["validation_tokens"],
            train_sequences=index.sequences("train"),
            validation_sequences=index.sequences("validation"),
            train_shards=len(index.splits["train"]),
            validation_shards=len(index.splits["validation"]),
            train_dropped_tokens=packers["train"].dropped_tokens + replayed.dropped_tokens,
            validation_dropped_tokens=packers["validation"].dropped_tokens,
            corpus=stats,
            units=len(jobs),
            seq_len=settings.seq_len,
            dtype=dtype.name,
            train_domain_tokens=domain_tokens,
            train_replay_tokens=replayed.held_tokens,
            train_replay_documents=replayed.documents,
            replay_available_tokens=replayed.available_tokens,
        ).to_manifest()

    def validate(ref: ArtifactRef) -> None:
        ShardIndex.load(ref.path)  # the bytes were verified against the manifest's checksums

    def build_or_discard_units(directory: Path) -> dict[str, Any]:
        try:
            return build(directory)
        except BaseException as error:
            if is_input_error(error):
                # Still under the key's lock. The same input fails again, and a fixed (or
                # restored) one has another key, so the units finished under this key could
                # never be resumed: kept, they would stay forever.
                shutil.rmtree(store.work_dir(STAGE, key), ignore_errors=True)
            raise

    return store.get_or_build(STAGE, key, build_or_discard_units, record, validate=validate)


def pack_replay(
    share: float,
    results: list[UnitResult],
    seen: SeenKeys,
    domain_tokens: int,
    packer: ConcatPacker | DocumentPacker,
    writer: ShardWriter,
) -> ReplayCounts:
    """Packs the replay documents `choose_replay` takes, in unit order, then the first tokens of
    the one it cuts, into training rows of their own."""
    choice = choose_replay(results, seen.first_occurrences, packer.held, share, domain_tokens)
    counts = ReplayCounts(available_tokens=choice.available_tokens)

    def add(tokens: np.ndarray, lengths: np.ndarray) -> None:
        counts.documents += len(lengths)
        counts.tokens += int(lengths.sum())
        counts.held_tokens += int(packer.held(lengths).sum())
        writer.add(packer.add(tokens, lengths))

    for result, chosen in zip(results, choice.chosen, strict=True):
        for tokens, lengths in chosen_documents(result, result.array("lengths"), chosen):
            add(tokens, lengths)
    if choice.cut is not None:
        unit, document, keep = choice.cut
        start = int(results[unit].array("lengths")[:document].sum())
        add(np.asarray(results[unit].token_ids()[start : start + keep]), np.array([keep]))
    counts.dropped_tokens = packer.dropped_tokens
    return counts


def is_input_error(error: BaseException) -> bool:
    """A corpus input error, also when a worker pool raised it wrapped."""
    current: BaseException | None = error
    for _ in range(10):
        if current is None:
            return False
        if isinstance(current, CorpusInputError):
            return True
        current = current.__cause__ or current.__context__
    return False


def cap_documents(keep: np.ndarray, counts: dict[str, int], limit: int | None) -> np.ndarray:
    """`corpus.max_documents`: the first `limit` kept documents over all units, in order."""
    if limit is None:
        return keep
    room = limit - counts["train_documents"] - counts["validation_documents"]
    return keep & (np.cumsum(keep) <= max(room, 0))


def chosen_documents(
    result: UnitResult, lengths: np.ndarray, chosen: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The chosen documents' ids back to back, in chunks of about MERGE_CHUNK_TOKENS tokens."""
    if not chosen.any():
        return
    ends = np.cumsum(lengths)
    starts = ends - lengths
    tokens = result.token_ids()
    boundaries = np.searchsorted(ends, np.arange(MERGE_CHUNK_TOKENS, ends[-1], MERGE_CHUNK_TOKENS))
    edges = [0, *np.unique(boundaries + 1).tolist(), len(lengths)]
    for first, last in pairwise(edges):
        if first >= last or not chosen[first:last].any():
            continue
        window = np.asarray(tokens[starts[first] : ends[last - 1]])
        mask = np.repeat(chosen[first:last], lengths[first:last])
        yield window[mask], lengths[first:last][chosen[first:last]]
