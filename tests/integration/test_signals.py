"""A real `python -m flows` run ends cleanly whatever signal it gets, and leaves nothing behind.

The run is stopped in pretraining. SIGTERM or SIGINT, to the run alone or to its whole process
group (what `timeout`, systemd, Kubernetes, SLURM and a terminal's Ctrl-C send), must end it with
128 + the signal and one `error:` line, its MLflow runs KILLED, its Prefect flow run Cancelled
(never Crashed or RUNNING), and no process of its own alive: the temporary Prefect server
included, which lives in a session of its own so that the group's signal does not kill it before
the run has reported. A SIGKILL of the run alone (the OOM killer's) must not leave the server
behind either, and a server that does not start in time is one line, exit 3, no hang.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from flows.core.artifacts import file_lock
from flows.tracking.links import run_role
from flows.tracking.temporary_server import START_LOCK
from tests.integration.cli_runs import alive, local_env

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
ORPHAN_SECONDS = 20.0  # after a SIGKILL of the run, no process of it may be alive by then


# `make domain-lift`'s command on a small budget: its first step reads the shared Wikipedia files.
DOMAIN_LIFT = ["flows.lift", *TINY[1:]]
WIKIPEDIA = Path(os.environ.get("CLOZE_DATA_DIR", "../shared/data")) / "wikipedia_en_wikiextractor"


def start(
    root: Path, env: dict[str, str] | None = None, command: list[str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", *(command or ["flows", *TINY]), f"paths.root={root}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env or local_env(),
        start_new_session=True,
    )


def started_pretraining(root: Path) -> bool:
    stage = root / "artifacts" / "pretrain"
    return stage.is_dir() and any(stage.glob(".work-*/checkpoints/*.ckpt"))


def wait_for_pretraining(run: subprocess.Popen[str], root: Path) -> list[psutil.Process]:
    """Waits until pretraining has checkpointed; the run's processes then."""
    deadline = time.monotonic() + 600  # the stages before it, on a loaded machine
    while not started_pretraining(root):
        assert run.poll() is None, run.communicate()[0][-4000:]
        assert time.monotonic() < deadline, "pretraining never wrote a checkpoint"
        time.sleep(0.2)
    family = psutil.Process(run.pid).children(recursive=True)
    assert any(is_temporary_server(child) for child in family), "no temporary server"
    return family


def is_temporary_server(process: psutil.Process) -> bool:
    try:
        return "flows.tracking.temporary_server" in " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return False


def flow_run_states(root: Path) -> list[str]:
    with sqlite3.connect(root / "prefect" / "prefect.db") as database:
        return [row[0] for row in database.execute("SELECT state_type FROM flow_run")]


def task_run_states(root: Path) -> list[str]:
    with sqlite3.connect(root / "prefect" / "prefect.db") as database:
        return [row[0] for row in database.execute("SELECT state_type FROM task_run")]


def mlflow_statuses(root: Path) -> dict[str, str]:
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    return {
        run_role(run.data.tags, run.info.run_name): run.info.status
        for run in client.search_runs(experiments)
    }


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGTERM, False), (signal.SIGINT, True), (signal.SIGTERM, True)],
    ids=["term", "ctrl-c", "term-to-group"],
)
def test_a_signal_stops_the_run_marks_it_ended_and_leaves_no_process(
    tmp_path: Path, signum: int, to_group: bool
) -> None:
    root = tmp_path / "home"
    run = start(root)
    family = wait_for_pretraining(run, root)
    sent = time.monotonic()
    if to_group:  # what a terminal (Ctrl-C), `timeout` or a scheduler does
        os.killpg(run.pid, signum)
    else:  # what `kill` does
        os.kill(run.pid, signum)
    try:
        output = run.communicate(timeout=120)[0]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    stopped = time.monotonic() - sent
    left = alive(family)
    for process in left:
        process.kill()
    name = signal.Signals(signum).name
    print(f"{name}{' to the group' if to_group else ''}: stopped in {stopped:.1f} s")
    assert run.returncode == 128 + signum, output[-4000:]
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert errors == [f"error: stopped by {name}; the runs are marked KILLED. Rerun the same "
                      "command to resume: finished stages are reused and pretraining resumes "
                      "from its last checkpoint"], output[-4000:]  # fmt: skip
    assert "Traceback" not in output, output[-6000:]
    assert stopped < STOP_SECONDS, output[-4000:]
    assert left == [], [process.cmdline() for process in left]
    statuses = mlflow_statuses(root)
    assert statuses["pipeline"] == statuses["pretrain"] == "KILLED", (statuses, output[-6000:])
    # An operator's stop reads Cancelled in Prefect, not Crashed (issue 53, case 19).
    assert flow_run_states(root) == ["CANCELLED"], output[-4000:]
    assert not {"CRASHED", "RUNNING"} & set(task_run_states(root)), output[-4000:]
    if signum == signal.SIGINT:  # issue 33: the rerun after Ctrl-C finishes, resumed
        rerun = start(root)
        output = rerun.communicate(timeout=900)[0]
        assert rerun.returncode == 0, output[-4000:]
        assert "shards     [reused (cache hit)]" in output
        assert "RUNNING" not in mlflow_statuses(root).values()


@pytest.mark.skipif(not WIKIPEDIA.is_dir(), reason=f"needs the shared data: {WIKIPEDIA}")
def test_ctrl_c_on_the_domain_lift_command_ends_it_the_same_way(tmp_path: Path) -> None:
    root = tmp_path / "home"
    run = start(root, command=DOMAIN_LIFT)
    family = wait_for_pretraining(run, root)
    os.killpg(run.pid, signal.SIGINT)
    try:
        output = run.communicate(timeout=120)[0]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    left = alive(family)
    for process in left:
        process.kill()
    assert run.returncode == 128 + signal.SIGINT, output[-4000:]
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: stopped by SIGINT;"), output[-4000:]
    assert left == [], [process.cmdline() for process in left]
    statuses = mlflow_statuses(root)
    assert statuses["pipeline"] == statuses["pretrain"] == "KILLED", (statuses, output[-6000:])


def test_a_sigkill_of_the_run_alone_leaves_no_process_of_it(tmp_path: Path) -> None:
    """The OOM killer's signal: nothing of the run can react, so the server watches for it."""
    root = tmp_path / "home"
    run = start(root)
    family = wait_for_pretraining(run, root)
    os.kill(run.pid, signal.SIGKILL)
    run.communicate(timeout=60)
    killed = time.monotonic()
    while alive(family) and time.monotonic() - killed < ORPHAN_SECONDS:
        time.sleep(0.2)
    left = alive(family)
    print(f"SIGKILL: the run's last process ended {time.monotonic() - killed:.1f} s after it")
    for process in left:
        process.kill()
    assert left == [], [process.cmdline() for process in left]


def test_a_server_that_does_not_start_in_time_is_one_line_and_exit_3(tmp_path: Path) -> None:
    root = tmp_path / "home"
    run = start(root, local_env(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="1"))
    begun = time.monotonic()
    family: list[psutil.Process] = []
    while run.poll() is None and time.monotonic() - begun < 120:
        family += psutil.Process(run.pid).children(recursive=True)
        time.sleep(0.1)
    output = run.communicate(timeout=60)[0]
    took = time.monotonic() - begun
    print(f"server start-up failure: exit after {took:.1f} s")
    assert run.returncode == 3, output[-4000:]
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: the temporary Prefect server did not answer within 1 s"
    ), output[-4000:]
    assert "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in errors[0]
    assert "Traceback" not in output and took < 60, output[-4000:]  # no hang after the line
    assert alive(family) == []


@contextmanager
def held(lock: Path) -> Iterator[None]:
    with file_lock(lock):
        yield


def test_a_server_start_waits_for_the_home_s_start_lock(tmp_path: Path) -> None:
    """Two first runs on one fresh home must not create the Prefect database at once: while
    another start holds the home's lock, a run starts no server and creates no database."""
    root = tmp_path / "home"
    with held(root / "prefect" / START_LOCK):
        run = start(root)
        waited = time.monotonic()
        while time.monotonic() - waited < 15:
            assert run.poll() is None, run.communicate()[0][-4000:]
            children = psutil.Process(run.pid).children(recursive=True)
            assert not any(is_temporary_server(child) for child in children)
            time.sleep(0.5)
        assert not (root / "prefect" / "prefect.db").exists()
    family = wait_for_pretraining(run, root)  # released: the run goes on
    os.killpg(run.pid, signal.SIGTERM)
    assert run.wait(timeout=120) == 128 + signal.SIGTERM
    assert alive(family) == []
