"""A relation task's texts to token ids: each marker a token of its own, long texts windowed around
the entities rather than cut at `max_length`; and the relation types the F1s are scored over.

The markers are added to the run's tokenizer as special tokens matched on the raw text, so
`<e1>` is one id instead of `<`, `e`, `##1`, `>`; the encoders of both arms get an embedding row
for each (lightning_modules/models/relation_head.py). A text longer than `max_length` keeps every
marker: the stretch from the first marker to the last, centred, with the context around it; when
even that stretch is too long, the markers, the entities' words, then the words nearest them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tokenizers import AddedToken, Tokenizer

from flows.downstream.tasks.encoding import EncodedSplit
from flows.downstream.tasks.markers import Markers
from flows.downstream.tasks.readers import TextExample
from lightning_modules.label_metrics import relation_type


@dataclass(frozen=True)
class MarkerIds:
    """The markers' token ids: each entity's (open, close), in the head's order."""

    pairs: tuple[tuple[int, int], ...]

    @property
    def starts(self) -> list[int]:
        return [open_ for open_, _ in self.pairs]

    @property
    def all(self) -> list[int]:
        return [token for pair in self.pairs for token in pair]


def add_marker_tokens(tokenizer: Tokenizer, markers: Markers) -> MarkerIds:
    """Each marker as a special token matched on the raw text (before any lowercasing)."""
    flat = [marker for pair in markers for marker in pair]
    tokenizer.add_special_tokens([AddedToken(m, special=True, normalized=False) for m in flat])
    ids = [tokenizer.token_to_id(marker) for marker in flat]
    known = [token for token in ids if token is not None]
    assert len(known) == len(ids), f"the tokenizer did not add {flat}"
    return MarkerIds(tuple((known[i], known[i + 1]) for i in range(0, len(known), 2)))


def window(ids: list[int], entities: list[tuple[int, int]], room: int) -> list[int]:
    """`room` of `ids` keeping every marker (`entities`: each one's open and close positions)."""
    first = min(open_ for open_, _ in entities)
    last = max(close for _, close in entities)
    if last - first + 1 <= room:
        spare = room - (last - first + 1)
        start = max(0, min(first - spare // 2, len(ids) - room))
        return ids[start : start + room]
    markers = {position for pair in entities for position in pair}

    def rank(position: int) -> tuple[int, int, int]:
        distance = min(
            0 if open_ < position < close else min(abs(position - open_), abs(position - close))
            for open_, close in entities
        )
        return (position not in markers, distance, position)

    kept = sorted(sorted(range(len(ids)), key=rank)[:room])
    return [ids[position] for position in kept]


def special_ends(tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer's post-processor puts before and after a text ([CLS], [SEP])."""
    probe = tokenizer.encode("x")
    content = [p for p, special in enumerate(probe.special_tokens_mask) if not special]
    return probe.ids[: content[0]], probe.ids[content[-1] + 1 :]


def encode_relations(
    tokenizer: Tokenizer, examples: list[TextExample], markers: MarkerIds, max_length: int
) -> EncodedSplit:
    """Token ids of marked texts, windowed to `max_length`; `truncated` counts the windowed
    ones. The tokenizer must hold the markers (`add_marker_tokens`); its truncation is turned
    off here, since windowing replaces it."""
    tokenizer.no_truncation()
    before, after = special_ends(tokenizer)
    room = max_length - len(before) - len(after)
    encodings = tokenizer.encode_batch([e.text for e in examples], add_special_tokens=False)
    items, windowed = [], 0
    for example, encoding in zip(examples, encodings, strict=True):
        ids = encoding.ids
        if len(ids) > room:
            entities = [(ids.index(open_), ids.index(close)) for open_, close in markers.pairs]
            ids = window(ids, entities, room)
            windowed += 1
        row = before + ids + after
        items.append({"input_ids": row, "token_type_ids": [0] * len(row), "labels": example.label})
    return EncodedSplit(items, [example.label for example in examples], windowed)


def type_matrix(labels: list[str], negative: str | None) -> np.ndarray:
    """`(labels, types)`: 1 where a label is of a relation type (its direction stripped), the
    negative label's type left out: what the bootstrap sums a confusion matrix into."""
    types = sorted({relation_type(label) for label in labels} - {relation_type(negative or "")})
    matrix = np.zeros((len(labels), len(types)))
    for row, label in enumerate(labels):
        if relation_type(label) in types:
            matrix[row, types.index(relation_type(label))] = 1.0
    return matrix
