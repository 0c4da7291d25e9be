"""The embedded default corpus: stdlib docstrings plus pydoc topics, available offline everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flows.corpora import pydoc_topics_task
from flows.corpora.stdlib_docs import pydoc_topics, stdlib_docstrings, stdlib_fingerprint


class PydocSource:
    def __init__(self, exclude_downstream_test: bool) -> None:
        # Leaving the downstream test modules out keeps evaluation text unseen during pretraining,
        # so the measured lift is transfer, not memorisation of the test inputs.
        self.exclude_downstream_test = exclude_downstream_test

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "pydoc", "stdlib": stdlib_fingerprint(),
                "exclude_downstream_test": self.exclude_downstream_test}

    def texts(self) -> Iterator[str]:
        for docstring in stdlib_docstrings():
            if (self.exclude_downstream_test
                    and pydoc_topics_task.module_split(docstring.module) == "test"):
                continue
            yield docstring.text
        yield from pydoc_topics()
