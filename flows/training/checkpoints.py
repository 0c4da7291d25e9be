"""Checkpoints that a kill, a full disk or a bad sector cannot turn into a run that never resumes.

Lightning's own save goes through fsspec, which writes into $TMPDIR and then moves the file: when
$TMPDIR is another filesystem, that move is a copy, and a kill during it leaves `last.ckpt`
truncated (and an orphan in $TMPDIR). Here a checkpoint is written beside its final name, fsynced,
then renamed over it; the checkpoint it replaces is kept as `<name>.previous` until then. On
resume a checkpoint that does not load is set aside (`<name>.corrupt-<time>`, named in a warning)
and the previous one is used, or the stage starts over when none loads.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from flows.core.artifacts import atomic_file

PREVIOUS_SUFFIX = ".previous"
log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Saves each checkpoint atomically in its own directory, keeping the one it replaces."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(target) as handle:
            torch.save(checkpoint, handle)
            keep_previous(target)  # the new bytes are written; the old file is still intact


def keep_previous(path: Path) -> None:
    """Hard-links `path` to `<path>.previous` (atomically) so it survives being replaced."""
    if not path.is_file():
        return
    previous = path.with_name(path.name + PREVIOUS_SUFFIX)
    link = path.with_name(f".{previous.name}.{os.getpid()}.link")
    link.unlink(missing_ok=True)
    os.link(path, link)
    os.replace(link, previous)


def resumable_checkpoint(path: Path) -> Path | None:
    """`path`, or the checkpoint it replaced, whichever loads first; None to start over.

    Also clears partial files a killed save left beside it: under the stage's lock no other
    process is writing here.
    """
    for partial in path.parent.glob(".*.partial"):
        partial.unlink(missing_ok=True)
    for candidate in (path, path.with_name(path.name + PREVIOUS_SUFFIX)):
        if candidate.is_file() and loads(candidate):
            return candidate
    return None


def loads(path: Path) -> bool:
    """Whether `path` loads as a checkpoint; a damaged one is moved aside with a warning."""
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:
        aside = path.with_name(f"{path.name}.corrupt-{time.time_ns()}")
        os.rename(path, aside)
        log.warning(
            "checkpoint %s does not load (%s: %s); set aside as %s, resuming from the previous "
            "checkpoint if one loads, else from the start of the stage",
            path,
            type(error).__name__,
            str(error)[:200],
            aside,
        )
        return False
    return True
