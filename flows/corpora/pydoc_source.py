"""The embedded default corpus: stdlib docstrings plus pydoc topics, offline everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flows.corpora import pydoc_topics_task
from flows.corpora.base import clean_text
from flows.corpora.stdlib_docs import pydoc_topics, stdlib_docstrings, stdlib_fingerprint


class PydocSource:
    def __init__(self, exclude_downstream_test: bool) -> None:
        # Leaving the downstream test modules out keeps evaluation text unseen during pretraining,
        # so the measured lift is transfer, not memorisation of the test inputs.
        self.exclude_downstream_test = exclude_downstream_test

    def fingerprint(self) -> dict[str, Any]:
        return {
            "kind": "pydoc",
            "stdlib": stdlib_fingerprint(),
            "exclude_downstream_test": self.exclude_downstream_test,
        }

    def texts(self) -> Iterator[str]:
        # By cleaned text, not only by module: one docstring can appear in several modules.
        held_out = (
            {
                clean_text(doc.text)
                for doc in stdlib_docstrings()
                if pydoc_topics_task.module_split(doc.module) == "test"
            }
            if self.exclude_downstream_test
            else set()
        )
        for docstring in stdlib_docstrings():
            if clean_text(docstring.text) not in held_out:
                yield docstring.text
        yield from pydoc_topics()
