"""Faults of the run's home: it cannot be written, it fills up, or another process holds its
MLflow store.

Each runs the real CLI and checks the error names the place and the fix, and that no process
of the run (the temporary Prefect server included) outlives it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import torch

from tests.conftest import mounted_tmpfs
from tests.integration.cli_runs import local_env, run_cli

pytestmark = pytest.mark.slow
SMOKE = ["experiment=smoke", "corpus.max_documents=300", "trainer.max_steps=20"]


def test_a_read_only_home_fails_at_once_naming_cloze_home_and_the_path(
    read_only_home: Path,
) -> None:
    code, output = run_cli(SMOKE, local_env(read_only_home))
    assert code == 2, output[-3000:]
    assert f"error: paths.root={read_only_home} is not writable: {read_only_home} " in output
    assert "set CLOZE_HOME (or paths.root=...) to a writable folder" in output
    assert "Starting temporary server" not in output  # it fails before any service starts
    assert "Traceback" not in output


def test_a_store_locked_by_another_process_is_retried_then_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    database = home / "mlflow.db"
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process would hold it the same way
    try:
        code, output = run_cli(
            [*SMOKE, "tracking.retry_attempts=2", "tracking.retry_backoff_seconds=0.5"],
            local_env(home),
        )
    finally:
        holder.close()
    assert code == 3, output[-3000:]
    assert f"error: the MLflow store {database} is locked: another process holds it" in output
    assert "2 attempt(s)" in output  # under the retry policy, not at the first failure
    assert "Traceback" not in output.split("error: the MLflow store")[-1]


def fill(folder: Path) -> Path:
    """Writes a ballast file into `folder` until its filesystem has no space left."""
    ballast = folder / "ballast"
    chunk = bytes(1 << 20)
    with ballast.open("wb") as handle:
        try:
            while True:
                handle.write(chunk)
                handle.flush()
        except OSError:
            pass
    return ballast


def test_a_full_disk_in_pretraining_names_the_disk_keeps_the_checkpoint_and_a_rerun_resumes(
    tmp_path: Path,
) -> None:
    """The Prefect database lives elsewhere; the store and the MLflow database fill up."""
    args = [
        *SMOKE[:2],
        "trainer.max_steps=60",
        "trainer.checkpoint_every_steps=10",
        "trainer.val_every_steps=100",
        "finetune.train_examples=64",
        "finetune.validation_examples=32",
        "finetune.baselines=[majority]",
        "finetune.bootstrap_samples=100",
    ]
    env = {**local_env(tmp_path / "unused"), "PREFECT_HOME": str(tmp_path / "prefect")}
    with mounted_tmpfs(tmp_path / "home", "size=256m") as home:
        env["CLOZE_HOME"] = str(home)
        checkpoints = home / "artifacts" / "pretrain"
        ballast: list[Path] = []

        def fill_after_the_first_checkpoint() -> None:
            if not ballast and list(checkpoints.glob(".work-*/checkpoints/last.ckpt")):
                ballast.append(fill(home))

        code, output = run_cli(args, env, meanwhile=fill_after_the_first_checkpoint)
        assert ballast, output[-3000:]
        assert code == 3, output[-4000:]
        [error] = [line for line in output.splitlines() if line.startswith("error:")]
        assert error.startswith("error: the disk is full: no space left on device while writing")
        assert str(home) in error and "MLflow" not in error
        [last] = checkpoints.glob(".work-*/checkpoints/last.ckpt")
        torch.load(last, map_location="cpu", weights_only=True)  # the last good one, whole
        assert not list(checkpoints.glob(".work-*/checkpoints/.*.partial"))

        ballast[0].unlink()  # space freed: the same command resumes
        code, output = run_cli(args, env)
        assert code == 0, output[-4000:]
        [manifest] = checkpoints.glob("*/manifest.json")
        assert json.loads(manifest.read_text())["outputs"]["resumed"] is True
