"""Checkpoints are written whole or not at all, carry their checksum, and a damaged one is never
resumed from and never blocks a resume."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

from flows.training import training_checkpoints as checkpoints
from flows.training.training_checkpoints import AtomicCheckpointIO, resumable_checkpoint


def state(step: int) -> dict:
    return {"global_step": step, "weights": torch.full((64,), float(step))}


def saved_step(path: Path) -> int:
    return int(torch.load(path, weights_only=True)["global_step"])


def set_aside(directory: Path) -> list[Path]:
    """The checkpoints set aside in `directory` (without the checksums set aside with them)."""
    return [path for path in directory.glob("last.ckpt.corrupt-*") if path.suffix != ".sha256"]


def test_a_save_replaces_the_checkpoint_and_keeps_the_one_before(tmp_path: Path) -> None:
    last = tmp_path / "checkpoints" / "last.ckpt"
    writer = AtomicCheckpointIO()
    writer.save_checkpoint(state(1), last)
    writer.save_checkpoint(state(2), last)
    assert saved_step(last) == 2 and saved_step(last.with_name("last.ckpt.previous")) == 1
    assert sorted(path.name for path in last.parent.iterdir()) == [
        "last.ckpt",
        "last.ckpt.previous",
        "last.ckpt.previous.sha256",
        "last.ckpt.sha256",
    ]


def test_a_save_failing_midway_leaves_the_previous_checkpoint_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    last = tmp_path / "last.ckpt"
    writer = AtomicCheckpointIO()
    writer.save_checkpoint(state(1), last)

    def disk_full(value: object, handle) -> None:  # the fault: ENOSPC after some bytes
        handle.write(b"PK\x03\x04 partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoints.torch, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        writer.save_checkpoint(state(2), last)
    monkeypatch.undo()
    assert saved_step(last) == 1
    assert not list(tmp_path.glob(".*.partial"))


def test_a_truncated_checkpoint_is_set_aside_and_the_previous_one_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    last = tmp_path / "last.ckpt"
    writer = AtomicCheckpointIO()
    writer.save_checkpoint(state(1), last)
    writer.save_checkpoint(state(2), last)
    os.truncate(last, last.stat().st_size // 2)  # what a kill mid-copy leaves without it
    (tmp_path / ".last.ckpt.123.abc.partial").write_bytes(b"orphan of a killed save")
    with caplog.at_level(logging.WARNING):
        chosen = resumable_checkpoint(last)
    assert chosen == last.with_name("last.ckpt.previous") and saved_step(chosen) == 1
    assert f"checkpoint {last} does not match its checksum" in caplog.text
    assert len(set_aside(tmp_path)) == 1
    assert not list(tmp_path.glob(".*.partial"))


def test_with_no_loadable_checkpoint_the_stage_starts_over(tmp_path: Path) -> None:
    last = tmp_path / "last.ckpt"
    last.write_bytes(b"not a zip archive")
    last.with_name("last.ckpt.previous").write_bytes(b"")
    assert resumable_checkpoint(last) is None
    assert resumable_checkpoint(tmp_path / "never-written.ckpt") is None


def overwrite_tensors_with_nan(path: Path) -> None:
    """Same size, still a loadable archive: only the checksum tells it from the original."""
    saved = torch.load(path, weights_only=True)
    damaged = {**saved, "weights": torch.full_like(saved["weights"], float("nan"))}
    with path.open("wb") as handle:
        torch.save(damaged, handle)


def test_a_checkpoint_whose_tensors_became_nan_is_set_aside_though_it_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    last = tmp_path / "last.ckpt"
    writer = AtomicCheckpointIO()
    writer.save_checkpoint(state(1), last)
    writer.save_checkpoint(state(2), last)
    size = last.stat().st_size
    overwrite_tensors_with_nan(last)
    assert last.stat().st_size == size and torch.load(last, weights_only=True)["global_step"] == 2
    with caplog.at_level(logging.WARNING):
        chosen = resumable_checkpoint(last)
    assert chosen == last.with_name("last.ckpt.previous") and saved_step(chosen) == 1
    assert "does not match its checksum" in caplog.text
    [aside] = set_aside(tmp_path)
    assert aside.with_name(aside.name + ".sha256").is_file()  # set aside with its checksum


def test_a_checkpoint_without_its_checksum_is_not_trusted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    last = tmp_path / "last.ckpt"
    torch.save(state(3), last)  # as written before checkpoints carried checksums
    with caplog.at_level(logging.WARNING):
        assert resumable_checkpoint(last) is None
    assert "has no checksum (last.ckpt.sha256): its bytes cannot be verified" in caplog.text


def test_a_kill_between_the_rename_and_the_checksum_resumes_from_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    last = tmp_path / "last.ckpt"
    writer = AtomicCheckpointIO()
    writer.save_checkpoint(state(1), last)

    def killed(path: Path) -> str:  # the fault: the process dies before the checksum is written
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoints, "file_sha256", killed)
    with pytest.raises(KeyboardInterrupt):
        writer.save_checkpoint(state(2), last)
    monkeypatch.undo()
    assert saved_step(last) == 2  # in place, but its checksum is still the step-1 one
    chosen = resumable_checkpoint(last)
    assert chosen == last.with_name("last.ckpt.previous") and saved_step(chosen) == 1
