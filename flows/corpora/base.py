"""The corpus interface every stage consumes, plus cleaning, dedupe and the validation split.

A corpus yields documents in a fixed order, so the same files always give the same shards.
The validation split is decided by a hash of each document's text: it is stable across runs,
independent of order, and the tokenizer and shards stages agree on it without coordinating.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Annotated, Any, Protocol

from pydantic import Field, model_validator

from flows.core.settings import ConfigError, Number, Settings, bounds, one_of
from flows.corpora.cleaning import NORMALIZATIONS, clean_and_count_words, document_identity
from flows.corpora.excluded import ExcludedTexts
from flows.corpora.formats import FORMATS, CorpusInputError, ReadRules
from flows.corpora.replay import Replay, ReplaySettings
from flows.corpora.stats import CorpusStats

CORPUS_KINDS = ("pydoc", "files", "huggingface")
# Keys only one kind of source reads: set on another kind they would be ignored, so are refused.
KIND_KEYS = {
    "files": ("paths", "format", "decode_errors", "on_bad_rows"),
    "huggingface": ("name", "config_name", "split"),
    "pydoc": ("exclude_downstream_test",),
}


class CorpusSettings(Settings):
    """`corpus.*`: which source, and the cleaning and split rules applied to any source."""

    section = "corpus"
    kind: Annotated[str, one_of(CORPUS_KINDS)] = "pydoc"
    """pydoc (the embedded stdlib docs) | files | huggingface."""
    paths: list[str] = Field(default_factory=list)
    """files: files, globs or directories, optionally .gz/.bz2/.zst compressed."""
    format: Annotated[str, one_of(FORMATS)] = "auto"
    """files: auto (by suffix) | txt | jsonl | csv | tsv | parquet | wikiextractor | pubtator."""
    text_field: str = "text"
    """The field (jsonl, parquet, datasets) or column (csv, tsv) holding the text."""
    decode_errors: Annotated[str, one_of(("fail", "replace", "skip"))] = "fail"
    """fail | replace | skip: lines that are not UTF-8, and binary files."""
    on_bad_rows: Annotated[str, one_of(("fail", "skip"))] = "fail"
    """fail | skip: CSV/TSV rows with an unclosed quote or another field count than the header."""
    name: str | None = None
    """huggingface: a hub name or a save_to_disk folder."""
    config_name: str | None = None
    """huggingface: the dataset's configuration."""
    split: str = "train"
    """huggingface: the split to read."""
    exclude_downstream_test: bool = True
    """pydoc: keep the demo task's test modules out of pretraining (the lift measures transfer)."""
    exclude_validation_of: list[str] = Field(default_factory=list)
    """finetune.catalog tasks whose validation examples the corpus must not hold (e.g. [sst2])."""
    normalization: Annotated[str, one_of(NORMALIZATIONS)] = "NFC"
    """Unicode normalization: NFC | NFKC | NFD | NFKD | none."""
    min_words: Annotated[int, bounds(ge=1)] = 5
    """Shorter documents are dropped and counted."""
    max_chars: Annotated[int, bounds(ge=100)] = 1_000_000
    """Longer documents (and lines, read in bounded memory) are dropped and counted."""
    max_documents: Annotated[int, bounds(ge=1)] | None = None
    """Read at most this many documents; null: all."""
    validation_fraction: Annotated[Number, bounds(gt=0, lt=0.5)] = 0.05
    """Share of documents held out for validation, chosen by a hash of each text."""
    replay: ReplaySettings | None = None
    """General text mixed into training ({paths: [...], share: 0.1}); null: none."""

    @model_validator(mode="after")
    def _keys_are_read(self) -> CorpusSettings:
        for kind, keys in KIND_KEYS.items():
            for key in keys if kind != self.kind else ():
                if getattr(self, key) != type(self).model_fields[key].get_default(
                    call_default_factory=True
                ):
                    raise ConfigError(
                        f"corpus.{key} is read by corpus={kind} only, not by the "
                        f"corpus={self.kind} this config selects: select corpus={kind} first"
                    )
        return self

    @model_validator(mode="after")
    def _source_is_named(self) -> CorpusSettings:
        if self.kind == "files" and not self.paths:
            raise ConfigError("corpus.kind=files needs corpus.paths (files, globs or directories)")
        if self.kind == "huggingface" and not self.name:
            raise ConfigError(
                "corpus.kind=huggingface needs corpus.name (a hub name or a save_to_disk folder)"
            )
        return self

    @property
    def read_rules(self) -> ReadRules:
        return ReadRules(self.decode_errors, self.max_chars, self.on_bad_rows)


class SourceUnit(Protocol):
    """A picklable slice of a source (a file, a dataset) that a worker can read on its own."""

    @property
    def name(self) -> str: ...

    def texts(self, stats: CorpusStats) -> Iterator[str]: ...


class RawSource(Protocol):
    def fingerprint(self) -> dict[str, Any]: ...

    def units(self) -> list[Any]: ...


def cleaned_documents(
    unit: SourceUnit,
    settings: CorpusSettings,
    stats: CorpusStats,
    excluded: ExcludedTexts | None = None,
) -> Iterator[str]:
    """One unit's documents, cleaned, length-filtered and without `excluded` texts, but not
    deduplicated: deduplication needs every earlier unit, so it happens where units meet.
    """
    normalization, min_words, max_chars = (
        settings.normalization,
        settings.min_words,
        settings.max_chars,
    )
    for raw in unit.texts(stats):
        text, words = clean_and_count_words(raw, normalization)
        if len(text) > max_chars:
            stats.dropped_long += 1
        elif words < min_words:
            stats.dropped_short += 1
        elif excluded is not None and excluded.matches(text):
            stats.dropped_task_validation += 1
        else:
            yield text


class Corpus:
    """Cleaned, exact-deduplicated documents of a source, in the source's stable order."""

    def __init__(
        self,
        settings: CorpusSettings,
        source: RawSource,
        excluded: ExcludedTexts | None = None,
        replay: Replay | None = None,
    ) -> None:
        self.settings = settings
        self.source = source
        self.excluded = excluded
        # Read by the shards stage alone, and keyed there: the fingerprint below leaves it out,
        # so the tokenizer's key (and a run without replay) stays as it was.
        self.replay = replay
        self.stats = CorpusStats()

    def fingerprint(self) -> dict[str, Any]:
        """The source and the rules; excluded texts only when there are some, so a corpus
        without them keeps the key it had before they existed."""
        excluded = {} if self.excluded is None else {"excluded": self.excluded.fingerprint()}
        return {
            "source": self.source.fingerprint(),
            "rules": {
                "normalization": self.settings.normalization,
                "min_words": self.settings.min_words,
                "max_chars": self.settings.max_chars,
                "max_documents": self.settings.max_documents,
                "validation_fraction": self.settings.validation_fraction,
            },
            **excluded,
        }

    def units(self) -> list[SourceUnit]:
        return self.source.units()

    def documents(self, chars_per_unit: int | None = None) -> Iterator[str]:
        """All documents, deduplicated in order; optionally only the first characters of each unit.

        A per-unit quota samples every file of a large corpus without reading all of it.
        """
        stats = self.stats = CorpusStats()
        seen: set[int] = set()
        for unit in self.units():
            taken = 0
            for text in cleaned_documents(unit, self.settings, stats, self.excluded):
                key, _ = document_identity(text, 0.0)
                if key in seen:
                    stats.dropped_duplicate += 1
                    continue
                seen.add(key)
                stats.documents += 1
                yield text
                if stats.documents == self.settings.max_documents:
                    return
                taken += len(text)
                if chars_per_unit is not None and taken >= chars_per_unit:
                    break

    def training_documents(
        self, heldout: list[str], keep: int, max_chars: int | None = None
    ) -> Iterator[str]:
        """Train-side documents; up to `keep` validation-side ones go into `heldout` on the way.

        One pass gives both, so measuring a tokenizer on held-out text costs no second read.
        `max_chars` caps the text read, spread evenly over the units.
        """
        quota = None if max_chars is None else max(1, max_chars // len(self.units()))
        fraction = self.settings.validation_fraction
        for text in self.documents(quota):
            if not document_identity(text, fraction)[1]:
                yield text
            elif len(heldout) < keep:
                heldout.append(text)


def empty_corpus_error(corpus: Corpus, stats: CorpusStats) -> CorpusInputError:
    """Says where the text went, so the fix (a path, a threshold) is obvious."""
    units = [unit.name for unit in corpus.units()]
    shown = ", ".join(units[:3]) + (f" and {len(units) - 3} more" if len(units) > 3 else "")
    return CorpusInputError(
        f"the corpus is empty after cleaning: no training document is left from {shown}"
        f" ({dropped_text(corpus.settings, stats)}); check corpus.paths or relax the cleaning "
        "rules"
    )


def dropped_text(settings: CorpusSettings, stats: CorpusStats) -> str:
    """What cleaning dropped and why (`3 shorter than corpus.min_words=5; 1 duplicates`)."""
    reasons = {
        f"shorter than corpus.min_words={settings.min_words}": stats.dropped_short,
        f"longer than corpus.max_chars={settings.max_chars}": stats.dropped_long,
        "duplicates": stats.dropped_duplicate,
        "holding a text of corpus.exclude_validation_of": stats.dropped_task_validation,
        "binary files skipped": stats.binary_files_skipped,
        "undecodable lines skipped": stats.undecodable_lines_skipped,
        "bad CSV/TSV rows skipped": stats.bad_rows_skipped,
    }
    dropped = "; ".join(f"{count} {reason}" for reason, count in reasons.items() if count)
    return dropped or "the input holds no text"


def batched(items: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
