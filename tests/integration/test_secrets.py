"""A secret planted in `tracking.uri` appears nowhere: not on the console, not in any file of the
run's home (the Prefect database, its state messages and logged tracebacks included), not in
what MLflow stores. Real CLI runs, a real MLflow server; the whole home is grepped byte-wise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.servers import free_port, mlflow_server

pytestmark = pytest.mark.slow
SECRET = "planted-3f9c1e"
SMOKE = ["experiment=smoke", "corpus.max_documents=300", "trainer.max_steps=20"]


def run_cli(home: Path, uri: str, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "flows", *SMOKE, f"tracking.uri={uri}", *overrides],
        capture_output=True,
        text=True,
        timeout=900,
        env={**env, "CLOZE_HOME": str(home)},
    )


def files_holding(folder: Path, secret: str) -> list[Path]:
    return [
        path
        for path in folder.rglob("*")
        if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes()
    ]


def test_credentials_of_an_unreachable_tracking_server_leak_nowhere(tmp_path: Path) -> None:
    """The outage path: the error line, the flow run's state message and its logged traceback
    all name the tracking URI."""
    home = tmp_path / "home"
    uri = f"http://cloze:{SECRET}@127.0.0.1:{free_port()}"
    result = run_cli(home, uri, "tracking.retry_attempts=1")
    console = result.stdout + result.stderr
    assert result.returncode == 3, console[-4000:]
    [error] = [line for line in console.splitlines() if line.startswith("error:")]
    assert f"http://***@127.0.0.1:{uri.rsplit(':', 1)[1]}" in error
    assert SECRET not in console
    assert (home / "prefect" / "prefect.db").is_file()  # the database was written, and grepped
    assert files_holding(home, SECRET) == []


def test_credentials_of_a_working_tracking_server_leak_nowhere(tmp_path: Path) -> None:
    """The whole pipeline against a real MLflow server reached with user:password in its URI:
    params, tags, descriptions and the registry hold none of it, nor does Prefect."""
    home, store = tmp_path / "home", tmp_path / "mlflow"
    store.mkdir()
    with mlflow_server(store) as server:
        uri = server.replace("http://", f"http://cloze:{SECRET}@")
        result = run_cli(home, uri, "finetune.train_examples=100")
    console = result.stdout + result.stderr
    assert result.returncode == 0, console[-4000:]
    assert "http://***@127.0.0.1" in console  # the summary names the server, masked
    assert SECRET not in console
    assert files_holding(home, SECRET) == [] and files_holding(store, SECRET) == []
