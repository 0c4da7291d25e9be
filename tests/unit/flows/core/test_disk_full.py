"""A full disk is named as one, wherever it surfaces, and never costs the last good file.

The fault is injected at the write call (`ENOSPC`); the slow suite fills a real tmpfs
(tests/integration/test_store_faults.py).
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy.exc
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import TEMPORARILY_UNAVAILABLE

from flows.core.artifacts import atomic_file
from flows.core.disk import DiskFullError, disk_full_message
from flows.tracking.retry import RetryingClient, RetryPolicy


def test_a_write_that_fills_the_disk_keeps_the_previous_file_and_names_the_one_written(
    tmp_path: Path,
) -> None:
    target = tmp_path / "last.ckpt"
    target.write_bytes(b"previous, whole")
    with pytest.raises(DiskFullError) as raised, atomic_file(target) as handle:
        handle.write(b"half of the new one")
        raise OSError(errno.ENOSPC, "No space left on device")  # injected at the write
    assert raised.value.filename == str(target) and raised.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"previous, whole"
    assert sorted(tmp_path.iterdir()) == [target]  # no partial file left


def mlflow_failing_on_a_full_disk() -> MlflowException:
    """Marking the run FAILED on the way out, on the same full disk: SQLite's error wrapped by
    SQLAlchemy and MLflow, raised while the disk-full error was being handled."""
    try:
        raise sqlite3.OperationalError("database or disk is full")
    except sqlite3.OperationalError as cause:
        error = sqlalchemy.exc.OperationalError("UPDATE runs", {}, cause)
        error.__cause__ = cause
        wrapped = MlflowException(str(error), error_code=TEMPORARILY_UNAVAILABLE)
        wrapped.__cause__ = error
        return wrapped


def test_a_full_disk_buried_under_a_failing_tracking_call_is_what_the_user_reads(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "checkpoints" / "last.ckpt"
    try:
        try:
            raise DiskFullError(checkpoint)
        except DiskFullError:
            raise mlflow_failing_on_a_full_disk()  # noqa: B904 - as MLflow's own call raises
    except MlflowException as error:
        message = disk_full_message(error, tmp_path)
    assert message is not None
    assert message.startswith(
        f"the disk is full: no space left on device while writing {checkpoint}. Free space"
    )
    assert "pretraining resumes from its last complete checkpoint" in message


def test_sqlite_alone_names_the_run_root(tmp_path: Path) -> None:
    message = disk_full_message(mlflow_failing_on_a_full_disk(), tmp_path)
    assert message is not None and f"while writing under {tmp_path}." in message


def test_other_errors_are_not_a_full_disk(tmp_path: Path) -> None:
    assert disk_full_message(OSError(errno.EIO, "I/O error"), tmp_path) is None
    assert disk_full_message(RuntimeError("unexpected pos 704 vs 598"), tmp_path) is None


class FullStore:
    """Injects a fault: every write fails as a full SQLite disk does."""

    calls = 0

    def log_batch(self, run_id: str) -> None:
        self.calls += 1
        raise mlflow_failing_on_a_full_disk()


def test_a_full_disk_is_not_retried_as_a_tracking_outage() -> None:
    store = FullStore()
    client = RetryingClient(store, RetryPolicy(attempts=5, backoff_seconds=0.01), "sqlite:///x")
    with pytest.raises(MlflowException, match="database or disk is full"):
        client.log_batch("run-1")
    assert store.calls == 1
