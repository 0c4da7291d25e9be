"""A run left RUNNING by a SIGKILLed process is closed by the next run on the same store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from flows.tracking.runs import OWNER_TAG, Tracker, final_status, owner_is_gone, process_owner


def test_runs_of_a_dead_process_are_killed_and_live_ones_left_alone(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "cloze", tmp_path / "mlartifacts")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead_owner = process_owner(child.pid)
    child.kill()  # SIGKILL: the process never closes its run
    child.wait()
    orphan = tracker.start_run("pipeline", tags={OWNER_TAG: dead_owner})
    live = tracker.start_run("pipeline")  # this process: still running
    assert owner_is_gone(dead_owner) and not owner_is_gone(process_owner())
    assert tracker.close_stale_runs() == [orphan.run_id]
    client = MlflowClient(uri)
    assert client.get_run(orphan.run_id).info.status == "KILLED"
    assert client.get_run(live.run_id).info.status == "RUNNING"


def test_a_run_of_another_host_is_never_closed() -> None:
    assert not owner_is_gone("some-other-host:1:0.00")


def test_a_signal_marks_runs_killed_even_through_lightnings_exit() -> None:
    try:
        try:
            raise KeyboardInterrupt("SIGTERM")
        except KeyboardInterrupt:
            raise SystemExit(1) from None  # what Lightning's trainer does on Ctrl-C
    except SystemExit as lightning_exit:
        lightning_exit.__context__ = KeyboardInterrupt("SIGTERM")
        assert final_status(lightning_exit) == "KILLED"
    assert final_status(ValueError("bad")) == "FAILED"
