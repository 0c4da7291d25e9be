"""Entity markers in a relation task's texts: inserted at character offsets, or checked inline.

A relation example is one text with each entity between its open and close marker (`<e1>` ...
`</e1>`). A text whose markers are missing or unbalanced cannot say which pair it is about: it is
left out of its split, counted and named per split (`MarkerDrops`), never passed on to be
silently cut. A train file in which no row is whole, or a marker never occurs, is a config error:
the markers configured are not the file's.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from flows.downstream.tasks.readers import TextExample
from flows.downstream.tasks.spec import TaskInputError, TaskSpec

Markers = list[tuple[str, str]]
NAMED_ROWS = 3  # rows named per split; the count covers the rest


def marked_whole(text: str, markers: Markers) -> bool:
    """Each marker exactly once, every entity's close after its open."""
    for open_, close in markers:
        if text.count(open_) != 1 or text.count(close) != 1:
            return False
        if text.index(close) < text.index(open_) + len(open_):
            return False
    return True


@dataclass
class MarkerDrops:
    """Rows of one split left out for a missing or unbalanced marker: how many, of how many
    read, and the first few by `file:line`."""

    dropped: int = 0
    read: int = 0
    first: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {"dropped": self.dropped, "of": self.read, "first": self.first}


def keep_marked(examples: list[Any], markers: Markers) -> tuple[list[Any], MarkerDrops]:
    """The examples whose text holds every marker once, in order, and what was left out."""
    kept, drops = [], MarkerDrops(read=len(examples))
    for example in examples:
        if marked_whole(example.text, markers):
            kept.append(example)
            continue
        drops.dropped += 1
        if len(drops.first) < NAMED_ROWS:
            drops.first.append(example.at)
    return kept, drops


def check_train_markers(spec: TaskSpec, train: list[TextExample], where: str) -> None:
    """A marker absent from every train text, or no whole train row, is the config's fault."""
    key = f"finetune.catalog.{spec.name}.entity_markers"
    if spec.entity_offsets is not None:
        return  # the reader inserted them: present by construction
    for marker in (marker for pair in spec.markers() for marker in pair):
        if not any(marker in example.text for example in train):
            raise TaskInputError(
                f"{key}: marker {marker!r} never occurs in the train file {where}; set "
                f"{key} to the markers the file uses around its entities"
            )
    raise TaskInputError(
        f"{key}: no train text in {where} holds every marker of {spec.markers()} once, each "
        f"entity's close after its open; set {key} to the markers the file uses"
    )


def insert_markers(text: str, spans: list[tuple[int, int]], markers: Markers, at: str) -> str:
    """`text` with each entity's markers around its `[start, end)` character span."""
    ordered = sorted(zip(spans, markers, strict=True))
    for ((_, end), _), ((start, _), _) in itertools.pairwise(ordered):
        if start < end:
            raise TaskInputError(
                f"{at}: entity offsets {spans} overlap; each entity needs its own span of the "
                "text: fix or remove the record"
            )
    for (start, end), (open_, close) in reversed(ordered):
        text = f"{text[:start]}{open_}{text[start:end]}{close}{text[end:]}"
    return text


def entity_span(value: Any, text: str, name: str, at: str) -> tuple[int, int]:
    """One entity's `[start, end)` from a record field: two integers within the text."""
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(offset, int) and not isinstance(offset, bool) for offset in value)
        or not 0 <= value[0] < value[1] <= len(text)
    ):
        raise TaskInputError(
            f"{at}: field {name!r} must hold an entity's character offsets [start, end) within "
            f"the text (0 <= start < end <= {len(text)}); got {value!r}"
        )
    return value[0], value[1]
