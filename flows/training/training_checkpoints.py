"""Checkpoints that a kill, a full disk or a bad sector cannot turn into a run that never resumes,
or into one that resumes from damaged weights.

Lightning's own save goes through fsspec, which writes into $TMPDIR and then moves the file: when
$TMPDIR is another filesystem, that move is a copy, and a kill during it leaves `last.ckpt`
truncated (and an orphan in $TMPDIR). Here a checkpoint is written beside its final name, fsynced,
then renamed over it; the checkpoint it replaces is kept as `<name>.previous` until then.

Each checkpoint carries its sha256 in `<name>.sha256`, written once the checkpoint is in place. A
checkpoint can load and still be wrong (tensors overwritten with NaN bytes of the same size), so
loading is not the test: on resume, a checkpoint without its checksum, or whose bytes differ
from it, or that does not load, is set aside (`<name>.corrupt-<time>`, named in a warning) and the
previous one is used, or the stage starts over when none passes. A checkpoint whose bytes match
and whose values are NaN or infinite (saved by a run that diverged, or damaged before its
checksum was taken) would resume into the same divergence on every rerun: it is set aside too
(`<name>.diverged-<time>`), kept for inspection.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from flows.core.artifacts import atomic_file, file_sha256

PREVIOUS_SUFFIX = ".previous"
CHECKSUM_SUFFIX = ".sha256"
log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Saves each checkpoint atomically in its own directory, keeping the one it replaces, and
    records its checksum beside it."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(target) as handle:
            torch.save(checkpoint, handle)
            # The new bytes are written; the old file (and its checksum) is still intact.
            keep_previous(target)
        # A kill before this line leaves the new checkpoint with the old checksum: it is set
        # aside on resume and the previous one (a hard link, whose checksum matches) is used.
        with atomic_file(checksum_file(target), "w") as handle:
            handle.write(file_sha256(target))

    def remove_checkpoint(self, path: Any) -> None:
        super().remove_checkpoint(path)
        checksum_file(Path(path)).unlink(missing_ok=True)


def checksum_file(path: Path) -> Path:
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def keep_previous(path: Path) -> None:
    """Hard-links `path` (and its checksum) to `<path>.previous` (atomically) so it survives
    being replaced."""
    previous = path.with_name(path.name + PREVIOUS_SUFFIX)
    for source, target in ((path, previous), (checksum_file(path), checksum_file(previous))):
        if not source.is_file():
            continue
        link = target.with_name(f".{target.name}.{os.getpid()}.link")
        link.unlink(missing_ok=True)
        os.link(source, link)
        os.replace(link, target)


def resumable_checkpoint(path: Path) -> Path | None:
    """`path`, or the checkpoint it replaced, whichever passes its checksum and loads first;
    None to start over.

    Also clears partial files a killed save left beside it: under the stage's lock no other
    process is writing here.
    """
    for partial in path.parent.glob(".*.partial"):
        partial.unlink(missing_ok=True)
    candidates = [path, path.with_name(path.name + PREVIOUS_SUFFIX)]
    present = [candidate for candidate in candidates if candidate.is_file()]
    for candidate in present:
        step = sound(candidate)
        if step is not None:
            log.info("resuming from %s (step %d)", candidate, step)
            return candidate
    if present:
        log.warning("no checkpoint in %s passes: the stage starts from step 0", path.parent)
    return None


def sound(path: Path) -> int | None:
    """The step of `path` if it matches its checksum, loads and holds finite values only;
    else None, and a damaged one is moved aside with a warning (`.corrupt-<time>`; one whose
    values went non-finite `.diverged-<time>`, kept for inspection, never resumed from)."""
    kind, step = "corrupt", None
    try:
        problem = checksum_problem(path)
        if problem is None:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            step = int(checkpoint.get("global_step", 0))
            problem = non_finite(checkpoint)
            kind = "diverged" if problem else kind
    except Exception as error:
        problem = f"does not load ({type(error).__name__}: {str(error)[:200]})"
    if problem is None:
        return step
    aside = path.with_name(f"{path.name}.{kind}-{time.time_ns()}")
    os.rename(path, aside)
    if checksum_file(path).is_file():
        os.rename(checksum_file(path), checksum_file(aside))
    log.warning(
        "checkpoint %s %s; set aside as %s, resuming from the previous checkpoint if one "
        "passes, else from the start of the stage",
        path,
        problem,
        aside,
    )
    return None


TRAINED_STATE = ("state_dict", "optimizer_states")  # where values must be finite; callbacks'
# state may hold infinity by design (ModelCheckpoint's `kth_value` before any score).


def non_finite(checkpoint: dict[str, Any]) -> str | None:
    """Which weights (or optimizer state) of a checkpoint hold NaN or infinity, if any: a
    checkpoint that diverged resumes into the same divergence on every rerun."""
    pending: list[tuple[str, Any]] = [(key, checkpoint.get(key)) for key in TRAINED_STATE]
    bad: list[str] = []
    while pending:
        name, value = pending.pop()
        if isinstance(value, dict):
            pending += [(f"{name}.{key}".lstrip("."), item) for key, item in value.items()]
        elif isinstance(value, list | tuple):
            pending += [(f"{name}.{index}", item) for index, item in enumerate(value)]
        elif (
            isinstance(value, torch.Tensor)
            and value.is_floating_point()
            and not bool(torch.isfinite(value).all())
        ):
            bad.append(name)
    if not bad:
        return None
    return f"holds non-finite values ({len(bad)} tensor(s), e.g. {sorted(bad)[0]})"


def checksum_problem(path: Path) -> str | None:
    """What is wrong with `path`'s bytes against its recorded checksum; None when they match."""
    recorded = checksum_file(path)
    if not recorded.is_file():
        return f"has no checksum ({recorded.name}): its bytes cannot be verified"
    expected = recorded.read_text().strip()
    actual = file_sha256(path)
    if actual != expected:
        return (
            f"does not match its checksum (recorded {expected[:12]}, found {actual[:12]}): "
            "modified or damaged since it was saved"
        )
    return None
