"""Counts of what reading and cleaning kept and dropped, and why.

A corpus that shrinks silently is a bug a user cannot see; these counts travel with every unit of
work, are summed in order, and end up as metrics of the stage that read the text.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass
class CorpusStats:
    documents: int = 0
    dropped_short: int = 0
    dropped_long: int = 0
    dropped_duplicate: int = 0
    dropped_task_validation: int = 0  # corpus.exclude_validation_of
    undecodable_lines_skipped: int = 0
    undecodable_lines_replaced: int = 0
    binary_files_skipped: int = 0
    bad_rows_skipped: int = 0  # CSV/TSV rows dropped under corpus.on_bad_rows=skip

    def add(self, other: CorpusStats) -> None:
        for item in fields(self):
            setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
