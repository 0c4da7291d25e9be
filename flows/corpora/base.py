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
# Every character that is a control character or whitespace other than " " and "\n".
_RARE_CHARACTERS = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
)
_SPACE_RUNS = re.compile(" {2,}")
_LINE_EDGES = re.compile(" *\n[ \n]*")


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
    return clean_and_count_words(text, normalization)[0]


def clean_and_count_words(text: str, normalization: str) -> tuple[str, int]:
    """`clean_text` and the number of whitespace-separated words, in one pass where possible.

    Most text holds no tab, control or exotic space: for it, cleaning needs only C-speed
    substring checks, and the word count is a count of separators. Anything else takes the
    general line-by-line path, which gives the same result on the text the fast path accepts.
    """
    if normalization != "none" and not text.isascii():
        text = unicodedata.normalize(cast(NormalForm, normalization), text)
    if _RARE_CHARACTERS.search(text) is not None:
        text = _CONTROL.sub("", text)
        lines = (_SPACES.sub(" ", line).strip() for line in text.splitlines())
        text = "\n".join(line for line in lines if line)
        return text, len(text.split())
    if "  " in text:
        text = _SPACE_RUNS.sub(" ", text)
    if " \n" in text or "\n " in text or "\n\n" in text:
        text = _LINE_EDGES.sub("\n", text)
    text = text.strip(" \n")
    return text, text.count(" ") + text.count("\n") + 1 if text else 0


def document_identity(text: str, validation_fraction: float) -> tuple[int, bool]:
    """A document's dedupe key and its split, from one hash of its case-folded text.

    The split is a pure function of the text, so it is stable across runs and orders, and the
    tokenizer and shards stages agree on it without coordinating; copies that differ only in
    case share a key and a split. 64 bits: a key collision needs ~4e9 distinct documents.
    """
    digest = hashlib.blake2b(text.lower().encode("utf-8"), digest_size=16).digest()
    validation = int.from_bytes(digest[8:], "big") / 2**64 < validation_fraction
    return int.from_bytes(digest[:8], "big"), validation


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
        text, words = clean_and_count_words(raw, normalization)
        if len(text) > max_chars:
            stats.dropped_long += 1
        elif words < min_words:
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

    def documents(self, chars_per_unit: int | None = None) -> Iterator[str]:
        """All documents, deduplicated in order; optionally only the first characters of each unit.

        A per-unit quota samples every file of a large corpus without reading all of it.
        """
        stats = self.stats = CorpusStats()
        seen: set[int] = set()
        for unit in self.units():
            taken = 0
            for text in cleaned_documents(unit, self.settings, stats):
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
