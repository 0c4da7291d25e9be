"""A full disk, told apart from the errors it causes further up.

A full disk rarely surfaces as itself: torch's checkpoint writer raises `RuntimeError: unexpected
pos ...` with the `ENOSPC` only as its context, SQLite says `database or disk is full`, and the
MLflow call that marks the run failed on the way out then fails too, burying the first error
under one that blamed the tracking server. So the whole graph of causes and contexts is searched.
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFullError(OSError):
    """`ENOSPC` naming the file that was being written (the writer's own error names none)."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.ENOSPC, "No space left on device", str(path))


def linked_errors(error: BaseException) -> list[BaseException]:
    """`error`, then its causes and contexts, breadth first, each once."""
    found: list[BaseException] = []
    pending: list[BaseException] = [error]
    while pending and len(found) < 50:
        current = pending.pop(0)
        if any(current is seen for seen in found):
            continue
        found.append(current)
        pending += [link for link in (current.__cause__, current.__context__) if link is not None]
    return found


def is_full(error: BaseException) -> bool:
    """Whether this one error is a full disk (or quota)."""
    if isinstance(error, OSError) and error.errno in FULL_ERRNOS:
        return True
    return isinstance(error, sqlite3.OperationalError) and "disk is full" in str(error)


def is_disk_full(error: BaseException) -> bool:
    """Whether a full disk is behind `error`."""
    return any(is_full(link) for link in linked_errors(error))


def disk_full_message(error: BaseException, root: Path) -> str | None:
    """What to tell the user when a full disk is behind `error`; None otherwise. Names the file
    that could not be written when an error says which, else the run root."""
    full = [link for link in linked_errors(error) if is_full(link)]
    if not full:
        return None
    named = [link.filename for link in full if isinstance(link, OSError) and link.filename]
    where = f"writing {named[0]}" if named else f"writing under {root}"
    return (
        f"the disk is full: no space left on device while {where}. Free space on that disk, "
        "or set CLOZE_HOME (or paths.root=...) to one with room, then rerun: finished stages "
        "are reused and pretraining resumes from its last complete checkpoint."
    )
