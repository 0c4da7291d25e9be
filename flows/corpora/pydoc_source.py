"""The embedded default corpus: stdlib docstrings plus pydoc topics, offline everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flows.corpora.cleaning import clean_text
from flows.corpora.pydoc_topics_task import module_split
from flows.corpora.stats import CorpusStats
from flows.corpora.stdlib_docs import pydoc_topics, stdlib_docstrings, stdlib_fingerprint


@dataclass(frozen=True)
class PydocUnit:
    # Leaving the downstream test modules out keeps evaluation text unseen during pretraining,
    # so the measured lift is transfer, not memorisation of the test inputs.
    exclude_downstream_test: bool
    name: str = "pydoc"

    def texts(self, stats: CorpusStats) -> Iterator[str]:
        # By cleaned text, not only by module: one docstring can appear in several modules.
        held_out = (
            {
                clean_text(doc.text)
                for doc in stdlib_docstrings()
                if module_split(doc.module) == "test"
            }
            if self.exclude_downstream_test
            else set()
        )
        for docstring in stdlib_docstrings():
            if clean_text(docstring.text) not in held_out:
                yield docstring.text
        yield from pydoc_topics()


class PydocSource:
    def __init__(self, exclude_downstream_test: bool) -> None:
        self.unit = PydocUnit(exclude_downstream_test)

    def fingerprint(self) -> dict[str, Any]:
        return {
            "kind": "pydoc",
            "stdlib": stdlib_fingerprint(),
            "exclude_downstream_test": self.unit.exclude_downstream_test,
        }

    def units(self) -> list[PydocUnit]:
        return [self.unit]
