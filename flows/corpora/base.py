"""The corpus interface every stage consumes, plus cleaning, dedupe and the validation split.

A corpus yields documents in a fixed order, so the same files always give the same shards.
The validation split is decided by a hash of each document's text: it is stable across runs,
independent of order, and the tokenizer and shards stages agree on it without coordinating.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast

from flows.corpora.formats import FORMATS, CorpusInputError, ReadRules
from flows.corpora.stats import CorpusStats
from flows.settings import ConfigError

CORPUS_KINDS = ("pydoc", "files", "huggingface")
NORMALIZATIONS = ("NFC", "NFKC", "NFD", "NFKD", "none")
NormalForm = Literal["NFC", "NFD", "NFKC", "NFKD"]
_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class CorpusSettings:
    """`corpus.*`: which source, and the cleaning and split rules applied to any source."""

    kind: str = "pydoc"
    paths: list[str] = field(default_factory=list)
    format: str = "auto"
    text_field: str = "text"
    decode_errors: str = "fail"
    name: str | None = None
    config_name: str | None = None
    split: str = "train"
    exclude_downstream_test: bool = True
    normalization: str = "NFC"
    min_words: int = 5
    max_chars: int = 1_000_000
    max_documents: int | None = None
    validation_fraction: float = 0.05

    def __post_init__(self) -> None:
        if self.kind not in CORPUS_KINDS:
            raise ConfigError(f"corpus.kind={self.kind!r} must be one of {CORPUS_KINDS}")
        if self.kind == "files" and not self.paths:
            raise ConfigError("corpus.kind=files needs corpus.paths (files, globs or directories)")
        if self.kind == "huggingface" and not self.name:
            raise ConfigError(
                "corpus.kind=huggingface needs corpus.name (a hub name or a save_to_disk folder)"
            )
        if self.format not in FORMATS:
            raise ConfigError(f"corpus.format={self.format!r} must be one of {FORMATS}")
        if self.decode_errors not in ("fail", "replace", "skip"):
            raise ConfigError(
                f"corpus.decode_errors={self.decode_errors!r} must be fail, replace or skip"
            )
        if not 0.0 < self.validation_fraction < 0.5:
            raise ConfigError(
                f"corpus.validation_fraction={self.validation_fraction} must be in (0, 0.5)"
            )
        if self.normalization not in NORMALIZATIONS:
            raise ConfigError(
                f"corpus.normalization={self.normalization!r} must be one of {NORMALIZATIONS}"
            )
        if self.min_words < 1:
            raise ConfigError(f"corpus.min_words={self.min_words} must be at least 1")
        if self.max_chars < 100:
            raise ConfigError(f"corpus.max_chars={self.max_chars} must be at least 100")
        if self.max_documents is not None and self.max_documents < 1:
            raise ConfigError(f"corpus.max_documents={self.max_documents} must be positive")

    @property
    def read_rules(self) -> ReadRules:
        return ReadRules(self.decode_errors, self.max_chars)


class SourceUnit(Protocol):
    """A picklable slice of a source (a file, a dataset) that a worker can read on its own."""

    @property
    def name(self) -> str: ...

    def texts(self, stats: CorpusStats) -> Iterator[str]: ...


class RawSource(Protocol):
    def fingerprint(self) -> dict[str, Any]: ...

    def units(self) -> list[Any]: ...


def clean_text(text: str, normalization: str = "NFC") -> str:
    """Unicode normal form, no control characters, single spaces, no blank lines.

    Cheap and lossless for MLM; NFKC (compatibility forms, as ALBERT's SentencePiece does) is
    a config choice because it folds characters some domains need to keep apart.
    """
    if normalization != "none":
        text = unicodedata.normalize(cast(NormalForm, normalization), text)
    text = _CONTROL.sub("", text)
    lines = (_SPACES.sub(" ", line).strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def text_hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def dedupe_key(text: str) -> int:
    """64 bits of the case-folded text: a collision needs ~4e9 distinct documents to be likely."""
    return int.from_bytes(text_hash(text.lower())[:8], "big")


def is_validation(text: str, fraction: float) -> bool:
    return int.from_bytes(text_hash(text)[:8], "big") / 2**64 < fraction


def cleaned_documents(
    unit: SourceUnit, settings: CorpusSettings, stats: CorpusStats
) -> Iterator[str]:
    """One unit's documents, cleaned and length-filtered but not deduplicated.

    Deduplication needs every earlier unit, so it happens where units meet, in order.
    """
    normalization, min_words, max_chars = (
        settings.normalization,
        settings.min_words,
        settings.max_chars,
    )
    for raw in unit.texts(stats):
        text = clean_text(raw, normalization)
        if len(text) > max_chars:
            stats.dropped_long += 1
        elif len(text.split()) < min_words:
            stats.dropped_short += 1
        else:
            yield text


class Corpus:
    """Cleaned, exact-deduplicated documents of a source, in the source's stable order."""

    def __init__(self, settings: CorpusSettings, source: RawSource) -> None:
        self.settings = settings
        self.source = source
        self.stats = CorpusStats()

    def fingerprint(self) -> dict[str, Any]:
        return {
            "source": self.source.fingerprint(),
            "rules": {
                "normalization": self.settings.normalization,
                "min_words": self.settings.min_words,
                "max_chars": self.settings.max_chars,
                "max_documents": self.settings.max_documents,
                "validation_fraction": self.settings.validation_fraction,
            },
        }

    def units(self) -> list[SourceUnit]:
        return self.source.units()

    def cleaned(self, unit: SourceUnit, stats: CorpusStats) -> Iterator[str]:
        return cleaned_documents(unit, self.settings, stats)

    def documents(self, chars_per_unit: int | None = None) -> Iterator[str]:
        """All documents, deduplicated in order; optionally only the first characters of each unit.

        A per-unit quota samples every file of a large corpus without reading all of it.
        """
        stats = self.stats = CorpusStats()
        seen: set[int] = set()
        for unit in self.units():
            taken = 0
            for text in self.cleaned(unit, stats):
                key = dedupe_key(text)
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
        for text in self.documents(quota):
            if not is_validation(text, self.settings.validation_fraction):
                yield text
            elif len(heldout) < keep:
                heldout.append(text)


def empty_corpus_error(corpus: Corpus, stats: CorpusStats) -> CorpusInputError:
    """Says where the text went, so the fix (a path, a threshold) is obvious."""
    units = [unit.name for unit in corpus.units()]
    shown = ", ".join(units[:3]) + (f" and {len(units) - 3} more" if len(units) > 3 else "")
    settings = corpus.settings
    reasons = {
        f"shorter than corpus.min_words={settings.min_words}": stats.dropped_short,
        f"longer than corpus.max_chars={settings.max_chars}": stats.dropped_long,
        "duplicates": stats.dropped_duplicate,
        "binary files skipped": stats.binary_files_skipped,
        "undecodable lines skipped": stats.undecodable_lines_skipped,
    }
    dropped = "; ".join(f"{count} {reason}" for reason, count in reasons.items() if count)
    return CorpusInputError(
        f"the corpus is empty after cleaning: no training document is left from {shown}"
        f" ({dropped or 'the input holds no text'}); check corpus.paths or relax the cleaning "
        "rules"
    )


def batched(items: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def open_corpus(settings: CorpusSettings) -> Corpus:
    if settings.kind == "pydoc":
        from flows.corpora.pydoc_source import PydocSource

        return Corpus(settings, PydocSource(settings.exclude_downstream_test))
    if settings.kind == "files":
        from flows.corpora.file_source import FileSource

        return Corpus(
            settings,
            FileSource(settings.paths, settings.format, settings.text_field, settings.read_rules),
        )
    from flows.corpora.hub_source import HubSource

    assert settings.name is not None
    return Corpus(
        settings,
        HubSource(settings.name, settings.config_name, settings.split, settings.text_field),
    )
