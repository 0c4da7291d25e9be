"""A run's final status is written even when a stop signal arrives during the write: the signal
waits for the write, then acts (Prefect's runner can send SIGTERM twice while it shuts down)."""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from flows.core.signals import stop_signals_deferred
from flows.tracking.retry import RetryingClient, RetryPolicy
from flows.tracking.runs import Tracker


class Stopped(Exception):
    """What Prefect's SIGTERM handler raises in a flow run (TerminationSignal), in miniature."""


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.usefixtures("sigterm_raises")
def test_a_signal_inside_the_block_acts_once_the_block_is_done() -> None:
    done = []
    with pytest.raises(Stopped), stop_signals_deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        done.append("written")
    assert done == ["written"]
    with pytest.raises(Stopped):  # the handler is back
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.usefixtures("sigterm_raises")
def test_a_sigterm_during_the_final_status_write_leaves_the_run_killed_not_running(
    tmp_path: Path,
) -> None:
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "cloze", None)
    run = tracker.start_run("pipeline")
    set_terminated = run.client.set_terminated

    def signalled_midway(*args: Any, **kwargs: Any) -> None:  # the fault: a second SIGTERM
        os.kill(os.getpid(), signal.SIGTERM)
        set_terminated(*args, **kwargs)

    run.client.set_terminated = signalled_midway  # type: ignore[method-assign]
    with pytest.raises(Stopped):
        run.finish("KILLED")
    assert tracker.client.get_run(run.run_id).info.status == "KILLED"


class ReadCutBySignal:
    """A store call that a stop signal reaches midway through a read of the local store."""

    def __init__(self, database: Path) -> None:
        self.database = database

    def search_metrics(self) -> int:
        cursor = sqlite3.connect(self.database).execute("SELECT * FROM metrics")
        cursor.fetchone()  # the read is open: SQLite's shared lock is held
        os.kill(os.getpid(), signal.SIGTERM)
        return len(cursor.fetchall())


@pytest.mark.usefixtures("sigterm_raises")
def test_a_stop_signal_during_a_local_store_read_leaves_no_lock_behind(tmp_path: Path) -> None:
    database = tmp_path / "mlflow.db"
    tracker = Tracker(f"sqlite:///{database}", "cloze", None, RetryPolicy(attempts=1))
    run = tracker.start_run("pretrain")
    run.log_metrics({"loss": 1.0, "accuracy": 0.5})
    reads = RetryingClient(ReadCutBySignal(database), RetryPolicy(attempts=1), tracker.tracking_uri)
    with pytest.raises(Stopped) as stopped:  # the traceback stays alive, as on a run's way out
        reads.search_metrics()
    run.finish("KILLED")  # the run's own next write: blocked by its own read if it were cut
    assert stopped.traceback and tracker.client.get_run(run.run_id).info.status == "KILLED"


# A finetune stage stopped while a task's child run is open: (what stopped it, the task run's
# final MLflow status). A signal reads KILLED, as the stage's and the pipeline's runs do.
STOPPED_TASK_RUN_CASES = [
    (KeyboardInterrupt(), "KILLED"),  # Ctrl-C during question-answering fine-tuning
    (RuntimeError("a bug"), "FAILED"),
]


@pytest.mark.parametrize(("error", "status"), STOPPED_TASK_RUN_CASES, ids=lambda c: str(c)[:9])
def test_a_task_run_open_when_the_stage_stops_ends_as_what_stopped_it(
    tmp_path: Path, error: BaseException, status: str
) -> None:
    from flows.orchestration.publish import TaskRuns

    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "cloze", None)
    task_runs = TaskRuns(tracker, tracker.start_run("finetune"))
    qa = task_runs.get("qa")
    task_runs.end_open(error)
    assert tracker.client.get_run(qa.run_id).info.status == status
