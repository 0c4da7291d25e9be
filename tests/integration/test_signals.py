"""SIGTERM and Ctrl-C stop a real `python -m flows` run within seconds and leave nothing behind.

The run is stopped in pretraining. It must exit with 128 + the signal, mark its MLflow runs
KILLED, and leave no process of its own alive: the temporary Prefect server (a uvicorn child)
included, which Python's default SIGTERM used to leave listening for many minutes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from flows.tracking.links import stage_name

pytestmark = pytest.mark.slow
TINY = [
    "experiment=smoke",
    "corpus.max_documents=300",
    "trainer.max_steps=400",
    "trainer.checkpoint_every_steps=50",
    "trainer.val_every_steps=200",
    "trainer.max_validation_sequences=16",
]
STOP_SECONDS = 30.0  # the bound asserted; the measured time is printed


def started_pretraining(root: Path) -> bool:
    stage = root / "artifacts" / "pretrain"
    return stage.is_dir() and any(stage.glob(".work-*/checkpoints/*.ckpt"))


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [
        (signal.SIGTERM, False),
        (signal.SIGINT, True),
    ],
    ids=["term", "ctrl-c"],
)
def test_a_signal_stops_the_run_marks_it_killed_and_leaves_no_process(
    tmp_path: Path, signum: int, to_group: bool
) -> None:
    root = tmp_path / "home"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    env.pop("MLFLOW_TRACKING_URI", None)
    run = subprocess.Popen(
        [sys.executable, "-m", "flows", *TINY, f"paths.root={root}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600  # the stages before it, on a loaded machine
    while not started_pretraining(root):
        assert run.poll() is None, run.communicate()[0][-4000:]
        assert time.monotonic() < deadline, "pretraining never wrote a checkpoint"
        time.sleep(0.2)
    family = psutil.Process(run.pid).children(recursive=True)
    assert any("uvicorn" in " ".join(child.cmdline()) for child in family), "no temporary server"
    sent = time.monotonic()
    if to_group:  # what a terminal does on Ctrl-C
        os.killpg(run.pid, signum)
    else:  # what a scheduler or `kill` does
        os.kill(run.pid, signum)
    try:
        output = run.communicate(timeout=120)[0]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    stopped = time.monotonic() - sent
    left = [child for child in family if child.is_running() and child.status() != "zombie"]
    for child in left:
        child.kill()
    print(f"{signal.Signals(signum).name}: stopped in {stopped:.1f} s")
    assert run.returncode == 128 + signum, output[-4000:]
    assert f"error: stopped by {signal.Signals(signum).name}" in output
    assert stopped < STOP_SECONDS, output[-4000:]
    assert left == [], [child.cmdline() for child in left]
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    statuses = {
        stage_name(run.info.run_name): run.info.status for run in client.search_runs(experiments)
    }
    assert statuses["pipeline"] == "KILLED" and statuses["pretrain"] == "KILLED", (
        statuses,
        output[-6000:],
    )
    assert "Traceback" not in output.split("error: stopped by")[-1]
