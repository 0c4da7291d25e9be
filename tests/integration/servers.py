"""Real Prefect and MLflow servers on 127.0.0.1 for tests, stopped when the test ends."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
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
) -> Iterator[None]:
    with log.open("w") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        wait_until_healthy(health_url, process, log, timeout)
        yield
    finally:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()


@contextmanager
def prefect_server(home: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    command = [
        str(BIN / "prefect"),
        "server",
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-services",
    ]
    api = f"http://127.0.0.1:{port}/api"
    with running(command, f"{api}/health", home.parent / "prefect-server.log", env):
        yield api


@contextmanager
def mlflow_server(directory: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    command = [
        str(BIN / "mlflow"),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{directory / 'mlflow.db'}",
        "--artifacts-destination",
        str(directory / "artifacts"),
    ]
    uri = f"http://127.0.0.1:{port}"
    with running(command, f"{uri}/health", directory / "mlflow-server.log", env):
        yield uri
