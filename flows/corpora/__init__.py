"""Corpus sources: where raw text comes from, cleaned, deduplicated and split into documents."""

from flows.corpora.base import Corpus, CorpusSettings
from flows.corpora.sources import open_corpus

__all__ = ["Corpus", "CorpusSettings", "open_corpus"]
