"""Checkpoints are written whole or not at all, and a damaged one never blocks a resume."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

from flows.training import checkpoints
from flows.training.checkpoints import AtomicCheckpointIO, resumable_checkpoint


def state(step: int) -> dict:
    return {"global_step": step, "weights": torch.full((64,), float(step))}


def saved_step(path: Path) -> int:
    return int(torch.load(path, weights_only=True)["global_step"])


def test_a_save_replaces_the_checkpoint_and_keeps_the_one_before(tmp_path: Path) -> None:
    last = tmp_path / "checkpoints" / "last.ckpt"
    writer = AtomicCheckpointIO()
    writer.save_checkpoint(state(1), last)
    writer.save_checkpoint(state(2), last)
    assert saved_step(last) == 2 and saved_step(last.with_name("last.ckpt.previous")) == 1
    assert sorted(path.name for path in last.parent.iterdir()) == [
        "last.ckpt",
        "last.ckpt.previous",
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
    os.truncate(last, last.stat().st_size // 2)  # what a kill mid-copy used to leave
    (tmp_path / ".last.ckpt.123.abc.partial").write_bytes(b"orphan of a killed save")
    with caplog.at_level(logging.WARNING):
        chosen = resumable_checkpoint(last)
    assert chosen == last.with_name("last.ckpt.previous") and saved_step(chosen) == 1
    assert f"checkpoint {last} does not load" in caplog.text
    assert len(list(tmp_path.glob("last.ckpt.corrupt-*"))) == 1
    assert not list(tmp_path.glob(".*.partial"))


def test_with_no_loadable_checkpoint_the_stage_starts_over(tmp_path: Path) -> None:
    last = tmp_path / "last.ckpt"
    last.write_bytes(b"not a zip archive")
    last.with_name("last.ckpt.previous").write_bytes(b"")
    assert resumable_checkpoint(last) is None
    assert resumable_checkpoint(tmp_path / "never-written.ckpt") is None
