"""Real `python -m flows` runs for the slow tests, and the check that none leaves a process."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil


def local_env(home: Path | None = None, **extra: str) -> dict[str, str]:
    """The test process's environment without Prefect's or MLflow's pointers: a run then uses
    its home's own temporary Prefect server and SQLite store (`CLOZE_HOME=home` if given)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    env.pop("MLFLOW_TRACKING_URI", None)
    if home is not None:
        env["CLOZE_HOME"] = str(home)
    return {**env, **extra}


def run_cli(
    args: list[str],
    env: dict[str, str],
    timeout: float = 600,
    meanwhile: Callable[[], object] = lambda: None,
) -> tuple[int, str]:
    """Runs `python -m flows`, calling `meanwhile` while it runs; asserts that none of its child
    processes is left once it ends. The output goes to a file: a pipe nobody reads while the
    run goes on fills up and blocks it."""
    with tempfile.TemporaryFile("w+") as log:
        run = subprocess.Popen(
            [sys.executable, "-m", "flows", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        family = watch_family(run, time.monotonic() + timeout, meanwhile)
        log.seek(0)
        output = log.read()
    left = alive(family)
    for child in left:
        child.kill()
    assert left == [], [child.cmdline() for child in left]
    return run.returncode, output


def watch_family(
    run: subprocess.Popen[str], deadline: float, meanwhile: Callable[[], object]
) -> list[psutil.Process]:
    """Waits for `run` (killed at `deadline`), noting every child process it started."""
    family: dict[int, psutil.Process] = {}
    while run.poll() is None and time.monotonic() < deadline:
        try:
            family.update({child.pid: child for child in psutil.Process(run.pid).children(True)})
        except psutil.NoSuchProcess:
            break
        meanwhile()
        time.sleep(0.2)
    try:
        run.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if run.poll() is None:
            os.killpg(run.pid, 9)
    return list(family.values())


def alive(family: list[psutil.Process]) -> list[psutil.Process]:
    """The processes of `family` still running (zombies, already dead, are not)."""
    left = []
    for process in family:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process)
        except psutil.NoSuchProcess:
            pass
    return left
