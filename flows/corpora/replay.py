"""Replay: general text mixed into the training rows of a continuation.

Continual pretraining forgets less when a share of the original pretraining data is replayed
beside the new domain's (Ibrahim et al. 2024, "Simple and Scalable Strategies to Continually
Pre-train": re-warm, re-decay, and replay). `corpus.replay` names that general text as files; they
are read by the corpus's readers and cleaning rules, tokenized with the run's tokenizer and packed
into training rows of their own by the shards stage (flows/stages/shards/replay.py). The tokenizer
never reads them, and validation stays the domain's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, model_validator

from flows.core.settings import ConfigError, Number, Settings, bounds, one_of
from flows.corpora.file_source import FileSource, FileUnit
from flows.corpora.formats import FORMATS, ReadRules

KEY = "corpus.replay"


class ReplaySettings(Settings):
    """`corpus.replay.*`: general text replayed beside the domain's in the training rows."""

    section = KEY
    paths: list[str] = Field(default_factory=list)
    """Files, globs or directories of general text, e.g. a Wikipedia sample."""
    share: Annotated[Number, bounds(gt=0, lt=1)] = 0.1
    """Share of the training tokens (as packed into rows) that come from these files."""
    format: Annotated[str, one_of(FORMATS)] = "auto"
    """auto (by suffix) | txt | jsonl | csv | tsv | parquet | wikiextractor | pubtator."""
    text_field: str = "text"
    """The field (jsonl, parquet) or column (csv, tsv) holding the text."""

    @model_validator(mode="after")
    def _files_are_named(self) -> ReplaySettings:
        if not self.paths:
            raise ConfigError(
                f"{KEY} needs {KEY}.paths (files, globs or directories of general text, e.g. "
                "a Wikipedia sample); or leave corpus.replay unset (null) for no replay"
            )
        return self


@dataclass(frozen=True)
class Replay:
    """The replay files, resolved (a path matching nothing fails here), and the share to take."""

    source: FileSource
    share: float

    def fingerprint(self) -> dict[str, Any]:
        """What the shards key holds of the replay: the files' content and parsing, the share."""
        return {"source": self.source.fingerprint(), "share": self.share}

    def units(self) -> list[FileUnit]:
        return self.source.units()


def open_replay(settings: ReplaySettings, rules: ReadRules) -> Replay:
    """The general-text files of `corpus.replay`, read like the corpus's files under `rules`."""
    source = FileSource(settings.paths, settings.format, settings.text_field, rules, f"{KEY}.paths")
    return Replay(source, settings.share)
