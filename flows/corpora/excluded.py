"""Texts a pretraining corpus must not hold: a downstream task's validation examples.

Task-adaptive pretraining reads the text of a task's train file, and a task without a validation
file carves its validation split out of that same file. A model that has read its validation
sentences may score them higher than unseen ones, and every choice made on that split (learning
rate, how much task text) would then lean towards task-text pretraining. On SST-2 no such bias
was measured (docs/results/2026-12-02-sst2-validation-kept-out.md); keeping the text out makes
the choice clean by construction rather than by luck. `corpus.exclude_validation_of` drops from
the corpus every document that contains a validation text or is contained in one, word for
word: the sentence itself, and (SST) the phrases of its parse tree.

Matching is on words, case-folded and NFKC-normalised, so the corpus's own cleaning (whitespace,
normal form) cannot hide a copy. Both directions search an index by word, not all pairs.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any


def folded_words(text: str) -> str:
    """Case-folded NFKC words joined by single spaces, with a space at each end: one substring
    test then finds whole-word spans only ("a" is not found inside "art"). Unlike the task's
    own `drop_contained_rows` (case kept, flows/downstream/tasks/contained.py), a copy that differs
    in case or normal form still counts: excluding too much is the safe side here."""
    return f" {' '.join(unicodedata.normalize('NFKC', text).casefold().split())} "


@dataclass(frozen=True)
class ExcludedTexts:
    """The validation texts of `tasks`, normalised; picklable, so each sharding worker checks
    its own documents."""

    tasks: tuple[str, ...]
    texts: tuple[str, ...]

    @classmethod
    def of(cls, tasks: Iterable[str], texts: Iterable[str]) -> ExcludedTexts:
        padded = {folded_words(text) for text in texts}
        return cls(tuple(tasks), tuple(sorted(text for text in padded if text.strip())))

    def fingerprint(self) -> dict[str, Any]:
        """What a corpus key holds: the tasks, and a digest of the texts they excluded."""
        digest = hashlib.sha256("\n".join(self.texts).encode("utf-8")).hexdigest()
        return {"tasks": list(self.tasks), "texts": len(self.texts), "sha256": digest}

    @cached_property
    def _by_word(self) -> dict[str, list[str]]:
        """Every text under each of its words: the texts that may contain a document."""
        index: defaultdict[str, list[str]] = defaultdict(list)
        for text in self.texts:
            for word in set(text.split()):
                index[word].append(text)
        return dict(index)

    @cached_property
    def _by_rarest_word(self) -> dict[str, list[str]]:
        """Every text under its rarest word: a document contains the text only if it has it."""
        index: defaultdict[str, list[str]] = defaultdict(list)
        for text in self.texts:
            index[min(set(text.split()), key=lambda word: len(self._by_word[word]))].append(text)
        return dict(index)

    def matches(self, document: str) -> bool:
        """Whether the document contains an excluded text, or is contained in one."""
        padded = folded_words(document)
        words = set(padded.split())
        if not words:
            return False
        rarest = min(words, key=lambda word: len(self._by_word.get(word, ())))
        if any(padded in text for text in self._by_word.get(rarest, ())):
            return True
        return any(text in padded for word in words for text in self._by_rarest_word.get(word, ()))
