"""Real Prefect and MLflow servers on 127.0.0.1 for tests, stopped when the test ends."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_healthy(url: str, process: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"server exited with {process.returncode}: {log.read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout}s: {log.read_text()[-3000:]}")


@contextmanager
def running(
    command: list[str], health_url: str, log: Path, env: dict[str, str], timeout: float = 120
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("w") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        wait_until_healthy(health_url, process, log, timeout)
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Ends a server's whole process group; one a test already killed is left as it is."""
    try:
        os.killpg(process.pid, 15)
        process.wait(timeout=30)
    except ProcessLookupError:
        process.wait()
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()


@contextmanager
def prefect_server(
    home: Path,
    services: bool = False,
    database: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> Iterator[str]:
    """`services`: Prefect's background services too (the task-run recorder fills the graph).
    `database`: `PREFECT_SERVER_DATABASE_*` settings; SQLite under `home` when None. `timeout`:
    seconds it gets to become healthy."""
    with killable_prefect_server(home, services, database, timeout) as (api, _):
        yield api


@contextmanager
def killable_prefect_server(
    home: Path,
    services: bool = False,
    database: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A Prefect server and its process, for a test to kill mid-run (see killable_mlflow_server)."""
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.update(database or {})
    env.pop("PREFECT_API_URL", None)
    # The UI asks this for its API (the default, port 4200, is another server's or none).
    env["PREFECT_UI_API_URL"] = f"http://127.0.0.1:{port}/api"
    command = [
        str(BIN / "prefect"),
        "server",
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *([] if services else ["--no-services"]),
    ]
    api = f"http://127.0.0.1:{port}/api"
    log = home.parent / "prefect-server.log"
    with running(command, f"{api}/health", log, env, timeout) as process:
        yield api, process


@contextmanager
def mlflow_server(
    directory: Path, backend_store_uri: str | None = None, timeout: float = 120
) -> Iterator[str]:
    """`backend_store_uri` (a database URL, given as infra/ gives it: by environment variable);
    SQLite in `directory` when None. Artifacts go to `directory` either way. `timeout`: seconds
    it gets to become healthy."""
    with killable_mlflow_server(directory, backend_store_uri, timeout) as (uri, _):
        yield uri


@contextmanager
def killable_mlflow_server(
    directory: Path, backend_store_uri: str | None = None, timeout: float = 120
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """An MLflow server on `directory`'s store, with its process, for a test to kill mid-run.

    Killing its group (`os.killpg(process.pid, 9)`) takes the workers down too; a later server
    on the same directory serves the same runs and artifacts.
    """
    port = free_port()
    env = {
        **os.environ,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_BACKEND_STORE_URI": backend_store_uri or f"sqlite:///{directory / 'mlflow.db'}",
    }
    command = [
        str(BIN / "mlflow"),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--artifacts-destination",
        str(directory / "artifacts"),
    ]
    uri = f"http://127.0.0.1:{port}"
    log = directory / f"mlflow-server-{port}.log"
    with running(command, f"{uri}/health", log, env, timeout) as process:
        yield uri, process


@contextmanager
def serving_deployments(
    api: str,
    log: Path,
    env: dict[str, str],
    names: list[str],
    timeout: float = 180,
    config: str = "default",
    module: str | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m flows.deploy --config CONFIG serve` (or `python -m MODULE`, another serving
    process) against `api`, ready once every deployment in `names` (`flow/deployment`) is
    registered; stopped, with its flow-run subprocesses, at the end."""
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.exceptions import ObjectNotFound

    command = [
        sys.executable,
        "-m",
        *([module] if module else ["flows.deploy", "--config", config, "serve"]),
    ]
    with log.open("w") as output:
        process = subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            # Pick up a new flow run within a second, not the default ten.
            env={**env, "PREFECT_API_URL": api, "PREFECT_RUNNER_POLL_FREQUENCY": "1"},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        with SyncPrefectClient(api) as client:
            for name in names:
                while True:
                    if process.poll() is not None:
                        raise RuntimeError(f"serve exited: {log.read_text()[-3000:]}")
                    try:
                        client.read_deployment_by_name(name)
                        break
                    except ObjectNotFound:
                        if time.monotonic() > deadline:
                            raise TimeoutError(
                                f"{name} not served: {log.read_text()[-3000:]}"
                            ) from None
                        time.sleep(0.5)
        yield process
    finally:
        stop(process)
