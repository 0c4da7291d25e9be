"""Which source reads a corpus: the one place that knows every source kind."""

from __future__ import annotations

from flows.corpora.base import Corpus, CorpusSettings
from flows.corpora.file_source import FileSource
from flows.corpora.hub_source import HubSource
from flows.corpora.pydoc_source import PydocSource


def open_corpus(settings: CorpusSettings) -> Corpus:
    """The cleaned, deduplicated corpus that `settings` describe."""
    if settings.kind == "pydoc":
        return Corpus(settings, PydocSource(settings.exclude_downstream_test))
    if settings.kind == "files":
        return Corpus(
            settings,
            FileSource(settings.paths, settings.format, settings.text_field, settings.read_rules),
        )
    assert settings.name is not None
    return Corpus(
        settings,
        HubSource(settings.name, settings.config_name, settings.split, settings.text_field),
    )
