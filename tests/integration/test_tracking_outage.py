"""A tracking or Prefect server dies mid-run: a clear error, nothing lost, and a rerun continues."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.integration.servers import killable_mlflow_server, killable_prefect_server, mlflow_server

pytestmark = pytest.mark.slow
DEADLINE_SECONDS = 4.0
RETRY_ATTEMPTS = 3
OVERRIDES = [
    "experiment=smoke",
    "corpus.max_documents=400",
    "trainer.max_steps=60",
    "trainer.checkpoint_every_steps=10",
    "trainer.val_every_steps=100",
    "finetune.train_examples=64",
    "finetune.validation_examples=32",
    # The bounds below are on failing to report, not on evaluation: the cheapest evaluation.
    "finetune.baselines=[majority]",
    "finetune.bootstrap_samples=100",
    "tracking.experiment=outage",
    f"tracking.retry_attempts={RETRY_ATTEMPTS}",
    "tracking.retry_backoff_seconds=0.5",
    f"tracking.retry_deadline_seconds={DEADLINE_SECONDS}",
    "tracking.request_timeout_seconds=5",
]


def spent_budget(output: str, uri: str) -> tuple[int, float]:
    """The attempts and seconds the run's error says the failing MLflow call spent."""
    found = re.search(
        rf"MLflow at {re.escape(uri)} did not answer \w+ \((\d+) attempt\(s\) over "
        r"([\d.]+) s",
        output,
    )
    assert found, output[-4000:]
    return int(found[1]), float(found[2])


def cli(root: Path, uri: str) -> list[str]:
    return [sys.executable, "-m", "flows", *OVERRIDES, f"paths.root={root}", f"tracking.uri={uri}"]


def published(root: Path, stage: str) -> list[Path]:
    return list((root / "artifacts" / stage).glob("*/manifest.json"))


def run_until_checkpoint_then_kill(
    command: list[str], env: dict[str, str], root: Path, server: subprocess.Popen[bytes]
) -> tuple[subprocess.Popen[str], str, float]:
    """Starts a run, SIGKILLs `server` once pretraining has a checkpoint; returns how it ended."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    deadline = time.monotonic() + 300
    while not list((root / "artifacts" / "pretrain").glob(".work-*/checkpoints/last.ckpt")):
        assert process.poll() is None, process.communicate()[0][-4000:]
        assert time.monotonic() < deadline, "no pretraining checkpoint in time"
        time.sleep(0.05)
    os.killpg(server.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    output = process.communicate(timeout=300)[0]
    return process, output, time.monotonic() - killed_at


def test_a_lost_tracking_server_stops_the_run_clearly_and_a_rerun_continues(
    tmp_path: Path,
) -> None:
    store, root = tmp_path / "mlflow", tmp_path / "run"
    store.mkdir()
    env = {**os.environ}
    env.pop("PREFECT_HOME", None)  # the run's own local Prefect, under its root
    checkpoint = root / "artifacts" / "pretrain"
    with killable_mlflow_server(store) as (uri, server):
        process, output, stopped_after = run_until_checkpoint_then_kill(
            cli(root, uri), env, root, server
        )

    print(f"the run stopped {stopped_after:.1f} s after the tracking server was killed")
    print(*[line for line in output.splitlines() if "MLflow at" in line][-1:])
    assert process.returncode == 3, output[-4000:]
    assert f"error: MLflow at {uri} did not answer" in output
    assert f"check tracking.uri={uri}, then rerun: finished stages are reused" in output
    # Bounded by the retry policy, not by a stopwatch: the first failing call spends at most
    # `tracking.retry_attempts` attempts inside the deadline (the policy's own clock; the unit
    # tests check that arithmetic with an injected one), and every later call (marking the runs
    # FAILED on the way out) gets one try, so no second call retries.
    attempts, seconds = spent_budget(output, uri)
    assert 1 <= attempts <= RETRY_ATTEMPTS and seconds <= DEADLINE_SECONDS
    assert len(re.findall(r"MLflow \w+ failed \(.*\); retry \d+ in", output)) <= attempts - 1
    assert published(root, "tokenizer") and published(root, "shards")
    assert not published(root, "pretrain")
    assert list(checkpoint.glob(".work-*/checkpoints/last.ckpt"))

    with mlflow_server(store) as new_uri:  # same backend store, new port
        rerun = subprocess.run(
            cli(root, new_uri), capture_output=True, text=True, timeout=400, env=env
        )
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        client = MlflowClient(new_uri)
        experiment = client.get_experiment_by_name("outage")
        runs = client.search_runs([experiment.experiment_id], "tags.`cloze.run` = 'pipeline'")
    text = rerun.stdout + rerun.stderr
    assert "tokenizer  [reused (cache hit)]" in text
    assert "shards     [reused (cache hit)]" in text
    [manifest] = published(root, "pretrain")
    outputs = json.loads(manifest.read_text())["outputs"]
    assert outputs["resumed"] is True and outputs["steps"] == 60
    assert len(runs) == 2  # the first attempt's run survived the outage, beside the rerun's
    assert runs[0].info.status == "FINISHED"  # newest first


def test_a_lost_prefect_server_stops_the_run_clearly_and_a_local_rerun_continues(
    tmp_path: Path,
) -> None:
    root = tmp_path / "run"
    local_mlflow = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with killable_prefect_server(tmp_path / "prefect") as (api, server):
        env = {**os.environ, "PREFECT_API_URL": api}
        env.pop("PREFECT_HOME", None)
        process, output, stopped_after = run_until_checkpoint_then_kill(
            cli(root, local_mlflow), env, root, server
        )

    ended = time.time()
    print(f"the run stopped {stopped_after:.1f} s after the Prefect server was killed")
    assert process.returncode == 3, output[-4000:]
    assert f"error: the Prefect API at {api} stopped answering" in output
    assert "unset PREFECT_API_URL to run with a local one, then rerun" in output
    assert published(root, "tokenizer") and published(root, "shards")
    # The task bodies outlive the API: pretraining (and fine-tuning) may finish and publish
    # before the run stops. What is bounded is the time spent failing to report to Prefect after
    # the kill or after the last stage that published, whichever came later (training time
    # depends on the machine's load). Two calls fail, each tried 4 times over 2 + 4 + 8 s:
    # measured 44.7 s at a load average of 20 on 2 cores, 137-153 s while Prefect's defaults
    # (5 retries per call) were frozen by an early `import prefect` (test_prefect_settings.py).
    manifests = published(root, "pretrain") + published(root, "finetune")
    last = max([json.loads(manifest.read_text())["created_at"] for manifest in manifests] or [0])
    failing_to_report = ended - max(last, ended - stopped_after)
    print(f"the run spent {failing_to_report:.1f} s failing to report before it stopped")
    assert failing_to_report < 120
    assert published(root, "pretrain") or list(
        (root / "artifacts" / "pretrain").glob(".work-*/checkpoints/last.ckpt")
    )

    env = {**os.environ}
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_HOME", None)
    rerun = subprocess.run(
        cli(root, local_mlflow), capture_output=True, text=True, timeout=400, env=env
    )
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    text = rerun.stdout + rerun.stderr
    assert "tokenizer  [reused (cache hit)]" in text
    assert "shards     [reused (cache hit)]" in text
    assert len(published(root, "pretrain")) == len(published(root, "finetune")) == 1
