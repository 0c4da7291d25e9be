"""Train rows that are spans of longer train rows, and how to drop them.

SST's train file labels every phrase of every parse tree beside the whole sentence: 67,349 rows
of 9.4 words on average, of which 6,885 are whole sentences (19.4 words, like the dev file that
GLUE scores on). Few-shot work samples whole sentences (Gao et al. 2021, LM-BFF); a 500-example
sample of phrases is mostly two- and three-word fragments. `drop_contained_rows` keeps a train
row only when its words do not occur, contiguous and in order, inside a longer (or earlier equal)
row, so the labelled pool has the test split's shape.
"""

from __future__ import annotations

from collections import defaultdict

from flows.downstream.tasks.readers import TextExample


def padded_words(text: str) -> str:
    """The text's words joined by single spaces with a space at each end: one string containment
    test then finds whole-word spans only ("a" is not found inside "art")."""
    return f" {' '.join(text.split())} "


def whole_rows(examples: list[TextExample]) -> list[TextExample]:
    """The examples no other example contains, in file order. Longest first, so a row is checked
    against every longer row; equal texts keep their first row. Candidates come from an index of
    the kept rows by word, searched under the row's rarest word, so a 67k-row file takes about a
    second (a full pairwise scan would take minutes)."""
    padded = [padded_words(example.text) for example in examples]
    order = sorted(range(len(examples)), key=lambda index: -len(padded[index]))
    rows_with: defaultdict[str, list[int]] = defaultdict(list)
    kept: list[int] = []
    for index in order:
        words = set(padded[index].split())
        rarest = min(words, key=lambda word: len(rows_with.get(word, ())))
        if any(padded[index] in padded[other] for other in rows_with.get(rarest, ())):
            continue
        kept.append(index)
        for word in words:
            rows_with[word].append(index)
    return [examples[index] for index in sorted(kept)]
