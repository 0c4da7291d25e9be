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
from typing import Any, Protocol

from flows.corpora.formats import FORMATS
from flows.settings import ConfigError

CORPUS_KINDS = ("pydoc", "files", "huggingface")
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
    min_words: int = 5
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
        if self.min_words < 1:
            raise ConfigError(f"corpus.min_words={self.min_words} must be at least 1")
        if self.max_documents is not None and self.max_documents < 1:
            raise ConfigError(f"corpus.max_documents={self.max_documents} must be positive")


class RawSource(Protocol):
    def fingerprint(self) -> dict[str, Any]: ...

    def texts(self) -> Iterator[str]: ...


def clean_text(text: str) -> str:
    """NFC, no control characters, single spaces, no trailing blanks: cheap and lossless for MLM."""
    text = _CONTROL.sub("", unicodedata.normalize("NFC", text))
    lines = (_SPACES.sub(" ", line).strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def text_hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def is_validation(text: str, fraction: float) -> bool:
    return int.from_bytes(text_hash(text)[:8], "big") / 2**64 < fraction


@dataclass
class CorpusStats:
    documents: int = 0
    dropped_short: int = 0
    dropped_duplicate: int = 0


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
                "min_words": self.settings.min_words,
                "max_documents": self.settings.max_documents,
                "validation_fraction": self.settings.validation_fraction,
            },
        }

    def documents(self) -> Iterator[str]:
        stats = self.stats = CorpusStats()
        seen: set[bytes] = set()
        for raw in self.source.texts():
            text = clean_text(raw)
            if len(text.split()) < self.settings.min_words:
                stats.dropped_short += 1
                continue
            digest = text_hash(text.lower())
            if digest in seen:
                stats.dropped_duplicate += 1
                continue
            seen.add(digest)
            stats.documents += 1
            yield text
            if stats.documents == self.settings.max_documents:
                return

    def training_documents(self, heldout: list[str], keep: int) -> Iterator[str]:
        """Train-side documents; up to `keep` validation-side ones go into `heldout` on the way.

        One pass gives both, so measuring a tokenizer on held-out text costs no second read.
        """
        for text in self.documents():
            if not is_validation(text, self.settings.validation_fraction):
                yield text
            elif len(heldout) < keep:
                heldout.append(text)


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
            FileSource(
                settings.paths, settings.format, settings.text_field, settings.decode_errors
            ),
        )
    from flows.corpora.hub_source import HubSource

    assert settings.name is not None
    return Corpus(
        settings,
        HubSource(settings.name, settings.config_name, settings.split, settings.text_field),
    )
