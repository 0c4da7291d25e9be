"""Slow checks: the CLI against real Prefect and MLflow servers, and resume after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from flows.tracking.links import run_role
from tests.integration.servers import mlflow_server, prefect_server

pytestmark = pytest.mark.slow
TINY = ["experiment=smoke", "corpus.max_documents=800", "finetune.train_examples=200"]


def cli(*overrides: str) -> list[str]:
    return [sys.executable, "-m", "flows", *TINY, *overrides]


def test_pipeline_runs_against_real_prefect_and_mlflow_servers(tmp_path: Path) -> None:
    (tmp_path / "mlflow").mkdir()
    with (
        prefect_server(tmp_path / "prefect") as prefect_api,
        mlflow_server(tmp_path / "mlflow") as uri,
    ):
        env = {**os.environ, "PREFECT_API_URL": prefect_api}
        env.pop("PREFECT_HOME", None)
        result = subprocess.run(
            cli(f"paths.root={tmp_path / 'run'}", f"tracking.uri={uri}", "tracking.experiment=srv"),
            capture_output=True,
            text=True,
            timeout=400,
            env=env,
        )
        assert result.returncode == 0, result.stderr[-3000:]

        from prefect.client.orchestration import SyncPrefectClient

        with SyncPrefectClient(prefect_api) as client:
            flow_runs = client.read_flow_runs()
        assert [run.state.name for run in flow_runs] == ["Completed"]

        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("srv")
        runs = client.search_runs([experiment.experiment_id])
        assert sorted(run_role(run.data.tags, run.info.run_name) for run in runs) == sorted(
            ["pipeline", "tokenizer", "shards", "pretrain", "finetune", "pydoc_topics"]
        )
        finetune = next(
            run for run in runs if run_role(run.data.tags, run.info.run_name) == "finetune"
        )
        task = next(
            run for run in runs if run_role(run.data.tags, run.info.run_name) == "pydoc_topics"
        )
        assert task.data.tags["mlflow.parentRunId"] == finetune.info.run_id
        parent = next(
            run for run in runs if run_role(run.data.tags, run.info.run_name) == "pipeline"
        )
        artifacts = [item.path for item in client.list_artifacts(parent.info.run_id)]
        assert artifacts == ["config.yaml"]
    assert not (tmp_path / "run" / "prefect").exists()  # the server, not local mode, was used


def test_a_killed_pretraining_run_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    overrides = (
        f"paths.root={tmp_path}",
        "trainer.max_steps=300",
        "trainer.checkpoint_every_steps=40",
        "trainer.val_every_steps=100",
    )
    process = subprocess.Popen(
        cli(*overrides),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    checkpoints = tmp_path / "artifacts" / "pretrain"
    deadline = time.monotonic() + 300
    while not list(checkpoints.glob(".work-*/checkpoints/last.ckpt")):
        assert process.poll() is None, "the run ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint appeared in time"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not [p for p in checkpoints.iterdir() if not p.name.startswith(".")]

    result = subprocess.run(cli(*overrides), capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    manifests = list(checkpoints.glob("*/manifest.json"))
    assert len(manifests) == 1
    outputs = json.loads(manifests[0].read_text())["outputs"]
    assert outputs["resumed"] is True
    assert outputs["steps"] == 300
    assert outputs["val_loss"] < outputs["initial_val_loss"]
    assert not list(checkpoints.glob(".work-*")) and not list(checkpoints.glob(".tmp-*"))
    output = result.stdout + result.stderr
    assert "tokenizer  [reused (cache hit)]" in output
    assert "shards     [reused (cache hit)]" in output
