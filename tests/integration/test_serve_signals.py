"""Ctrl-C on `python -m flows.deploy serve` and on `make ui` ends like SIGTERM (issue 33).

serve: a real Prefect server, a real MLflow server, a served pipeline run stopped in pretraining
by SIGINT to serve's whole process group, as a terminal sends it. The flow run ends Cancelled,
its task runs ended, its MLflow runs KILLED, its concurrency slot released; serve exits with 130
and no process of it is left. `make ui` (flows/ui.py): both servers stop, no traceback, exit 130."""

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
from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from flows.core.paths import REPO_ROOT
from flows.deploy.served import NOT_SERVED_TAG, stopped_line
from flows.pipeline import TRAINING_TAG
from flows.tracking.links import run_role
from tests.guides import guide_quotes
from tests.integration.cli_runs import alive
from tests.integration.servers import (
    free_port,
    mlflow_server,
    prefect_server,
    serving_deployments,
    wait_until_healthy,
)

pytestmark = pytest.mark.slow
LONG = [
    "trainer.max_steps=5000",
    "trainer.checkpoint_every_steps=20",
    "trainer.val_every_steps=5000",
    "trainer.max_validation_sequences=16",
]


def test_ctrl_c_on_serve_cancels_the_run_and_releases_everything(tmp_path: Path) -> None:
    (tmp_path / "mlflow").mkdir()
    root = tmp_path / "run"
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_HOME"}
    with (
        prefect_server(tmp_path / "prefect", services=True) as api,
        mlflow_server(tmp_path / "mlflow") as uri,
        serving_deployments(api, tmp_path / "serve.log", env, ["cloze-pipeline/full"]) as serve,
    ):
        with SyncPrefectClient(api) as client:
            deployment = client.read_deployment_by_name("cloze-pipeline/full")
            overrides = [f"paths.root={root}", f"tracking.uri={uri}", *LONG]
            parameters = {"experiment": "smoke", "overrides": overrides}
            flow_run = client.create_flow_run_from_deployment(deployment.id, parameters=parameters)
        family = wait_for_pretraining(serve.pid, root, tmp_path / "serve.log")
        sent = time.monotonic()
        os.killpg(serve.pid, signal.SIGINT)  # Ctrl-C in serve's terminal
        code = serve.wait(timeout=120)
        print(f"serve stopped {time.monotonic() - sent:.1f} s after Ctrl-C")
        log = (tmp_path / "serve.log").read_text()
        print(log[-12000:])  # pytest shows it whole beside a failure; assertion messages are cut
        assert code == 128 + signal.SIGINT, log[-4000:]
        with SyncPrefectClient(api) as client:
            state = final_state(client, flow_run.id)
            task_runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id]))
            )
            limit = client.read_concurrency_limit_by_tag(TRAINING_TAG)
            stopped = client.read_deployment_by_name("cloze-pipeline/full")
        assert state == "Cancelled", log[-4000:]
        # The Deployments page and serve's last line say that nothing runs a triggered flow.
        assert stopped.paused and NOT_SERVED_TAG in stopped.tags
        assert (stopped.description or "").startswith("**Not served** since ")
        last = log.rstrip().splitlines()[-1]
        assert last.startswith("serve stopped: cloze-pipeline/full, "), log[-2000:]
        assert last.endswith(stopped_line([])[len("serve stopped: ") :]), last
        assert guide_quotes("deployments.md", stopped_line(["cloze-pipeline/full", "..."]))
        assert guide_quotes("deployments.md", "starts its description with `**Not served** since")
        assert [run.name for run in task_runs if run.state and run.state.is_running()] == []
        assert limit.active_slots == [], limit
        client_ml = MlflowClient(uri)
        experiment = client_ml.get_experiment_by_name("cloze")
        statuses = {
            run_role(run.data.tags, run.info.run_name): run.info.status
            for run in client_ml.search_runs([experiment.experiment_id])
        }
        assert statuses["pipeline"] == statuses["pretrain"] == "KILLED", (statuses, log[-3000:])
        ended = time.monotonic()
        while alive(family) and time.monotonic() - ended < 30:
            time.sleep(0.5)
        left = alive(family)
        for process in left:
            process.kill()
        assert left == [], [process.cmdline() for process in left]


def wait_for_pretraining(serve: int, root: Path, log: Path) -> list[psutil.Process]:
    """Until the served run's pretraining has checkpointed; serve's processes then."""
    deadline = time.monotonic() + 900
    stage = root / "artifacts" / "pretrain"
    while not (stage.is_dir() and any(stage.glob(".work-*/checkpoints/*.ckpt"))):
        assert time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.5)
    return psutil.Process(serve).children(recursive=True)


def final_state(client: SyncPrefectClient, flow_run_id: object) -> str | None:
    """The run's state once it is final (the runner reports the cancellation asynchronously)."""
    deadline = time.monotonic() + 60
    while True:
        flow_run = client.read_flow_run(flow_run_id)  # type: ignore[arg-type]
        if flow_run.state is not None and flow_run.state.is_final():
            return flow_run.state.name
        if time.monotonic() > deadline:
            return flow_run.state.name if flow_run.state else None
        time.sleep(1)


def test_ctrl_c_on_the_ui_stops_both_servers_without_a_traceback(tmp_path: Path) -> None:
    """`make ui` runs `python -m flows.ui`: Ctrl-C in its terminal (SIGINT to the whole
    foreground group) stops both servers and it ends as interrupted, 130."""
    prefect_port, mlflow_port = free_port(), free_port()
    log = tmp_path / "ui.log"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    command = [sys.executable, "-m", "flows.ui"]
    command += ["--prefect-port", str(prefect_port), "--mlflow-port", str(mlflow_port)]
    with log.open("w") as output:
        ui = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**env, "CLOZE_HOME": str(tmp_path / "home")},
            start_new_session=True,
        )
    try:
        wait_until_healthy(f"http://127.0.0.1:{prefect_port}/api/health", ui, log, 180)
        wait_until_healthy(f"http://127.0.0.1:{mlflow_port}/health", ui, log, 180)
        family = psutil.Process(ui.pid).children(recursive=True)
        os.killpg(ui.pid, signal.SIGINT)  # Ctrl-C in its terminal
        code = ui.wait(timeout=60)
    finally:
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGKILL)
    text = log.read_text()
    assert code == 128 + signal.SIGINT, (code, text[-3000:])
    assert "both servers stopped" in text
    assert "Traceback" not in text and "CancelledError" not in text, text[-3000:]
    assert f"MLflow UI: http://127.0.0.1:{mlflow_port}/#/experiments?workflowType=" in text
    assert alive(family) == []
