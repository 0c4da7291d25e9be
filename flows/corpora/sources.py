"""Which source reads a corpus: the one place that knows every source kind."""

from __future__ import annotations

from flows.corpora.base import Corpus, CorpusSettings, RawSource
from flows.corpora.excluded import ExcludedTexts
from flows.corpora.file_source import FileSource
from flows.corpora.hub_source import HubSource
from flows.corpora.pydoc_source import PydocSource
from flows.corpora.replay import open_replay


def open_corpus(settings: CorpusSettings, excluded: ExcludedTexts | None = None) -> Corpus:
    """The cleaned, deduplicated corpus that `settings` describe, less `excluded` texts, with
    its replay files (`corpus.replay`) resolved: a path matching nothing fails here too."""
    replay = None if settings.replay is None else open_replay(settings.replay, settings.read_rules)
    return Corpus(settings, raw_source(settings), excluded, replay)


def raw_source(settings: CorpusSettings) -> RawSource:
    if settings.kind == "pydoc":
        return PydocSource(settings.exclude_downstream_test)
    if settings.kind == "files":
        return FileSource(settings.paths, settings.format, settings.text_field, settings.read_rules)
    assert settings.name is not None
    return HubSource(settings.name, settings.config_name, settings.split, settings.text_field)
