"""`python -m flows.ui` (`make ui`): the Prefect UI and the MLflow UI on the local stores.

Both servers listen on 127.0.0.1 and read what `python -m flows` wrote under `paths.root`: the
Prefect home and the MLflow database. The banner's MLflow link opens the experiment's runs table
in MLflow's model-training view (its root would land on the GenAI pages,
docs/guides/deployments.md).

Each server runs in a session of its own, so a terminal's Ctrl-C reaches only this process: it
stops both with SIGTERM, their orderly path, and waits for them. No server handles a Ctrl-C of
its own (under the shell recipe this replaces, MLflow was reported printing a `CancelledError`
traceback on Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flows.core.cli import SERVICE_ERROR, fail
from flows.core.settings import ConfigError
from flows.tracking.links import MODEL_TRAINING_VIEW

HOST = "127.0.0.1"
STOP_SECONDS = 20  # after SIGTERM, how long a server gets before SIGKILL


@dataclass(frozen=True)
class UiSettings:
    """Where the two servers listen and which stores they read."""

    root: Path
    experiment: str
    prefect_port: int
    mlflow_port: int

    @property
    def prefect_url(self) -> str:
        return f"http://{HOST}:{self.prefect_port}"

    @property
    def mlflow_url(self) -> str:
        return f"http://{HOST}:{self.mlflow_port}"


def parse_args(argv: Sequence[str], prog: str = "python -m flows.ui") -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve the Prefect UI and the MLflow UI on 127.0.0.1 for the local run "
        "stores under paths.root (CLOZE_HOME, default .cloze); Ctrl-C stops both.",
    )
    parser.add_argument("--prefect-port", type=int, default=4200, help="default 4200")
    parser.add_argument("--mlflow-port", type=int, default=5000, help="default 5000")
    return parser.parse_args(list(argv))


def settings_from(args: argparse.Namespace) -> UiSettings:
    """The ports given, and the run root and experiment of `conf/` (as the pipeline uses)."""
    from flows.core.paths import RunPaths
    from flows.resolve import resolve_run

    run = resolve_run([], until=None).run
    root = RunPaths.from_settings(run.paths).root
    settings = UiSettings(root, run.tracking.experiment, args.prefect_port, args.mlflow_port)
    for flag, port in (("--prefect-port", args.prefect_port), ("--mlflow-port", args.mlflow_port)):
        check_port(flag, port)
    if args.prefect_port == args.mlflow_port:
        raise ConfigError(f"--prefect-port and --mlflow-port are both {args.prefect_port}")
    return settings


def check_port(flag: str, port: int) -> None:
    """A port the server can listen on, said before anything starts."""
    if not 1 <= port <= 65535:
        raise ConfigError(f"{flag}={port} is not a TCP port (1 to 65535)")
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError as error:
            raise ConfigError(
                f"{flag}={port}: {HOST}:{port} is taken ({error.strerror}); stop what listens "
                f"there or pass another {flag}"
            ) from None


def experiment_link(settings: UiSettings) -> str:
    """The experiment's runs table in the model-training view; before any run has created the
    experiment, the experiments list in that view."""
    database = settings.root / "mlflow.db"
    found = None
    if database.is_file():
        try:
            with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as store:
                found = store.execute(
                    "SELECT experiment_id FROM experiments WHERE name = ?", (settings.experiment,)
                ).fetchone()
        except sqlite3.Error:
            found = None  # an older or foreign schema: the list still opens
    if found is None:
        return f"{settings.mlflow_url}/#/experiments?{MODEL_TRAINING_VIEW}"
    return f"{settings.mlflow_url}/#/experiments/{found[0]}/runs?{MODEL_TRAINING_VIEW}"


def server_commands(settings: UiSettings) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each server's command line and environment; both listen on 127.0.0.1 only."""
    prefect_env = {
        **os.environ,
        "PREFECT_HOME": str(settings.root / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # The UI's own API address: its default is port 4200's, whatever port it is served on.
        "PREFECT_UI_API_URL": f"{settings.prefect_url}/api",
    }
    prefect = [sys.executable, "-m", "prefect", "server", "start"]
    prefect += ["--host", HOST, "--port", str(settings.prefect_port)]
    # MLflow's job workers serve GenAI features Cloze does not use; they made stopping slow.
    mlflow_env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    mlflow = [sys.executable, "-m", "mlflow", "server", "--host", HOST]
    mlflow += ["--port", str(settings.mlflow_port), "--workers", "1"]
    mlflow += ["--backend-store-uri", f"sqlite:///{settings.root / 'mlflow.db'}"]
    return {"Prefect": (prefect, prefect_env), "MLflow": (mlflow, mlflow_env)}


def start_servers(settings: UiSettings) -> dict[str, subprocess.Popen[bytes]]:
    """Both servers, each in a session of its own (no terminal signal reaches them)."""
    settings.root.mkdir(parents=True, exist_ok=True)
    return {
        name: subprocess.Popen(command, env=env, start_new_session=True)
        for name, (command, env) in server_commands(settings).items()
    }


def stop(servers: dict[str, subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each server's command, which stops its own workers (MLflow's uvicorn, Prefect's
    services) in order; then wait for its whole process group, and kill what is left of it after
    STOP_SECONDS. Signalling the whole group at once took about a second longer to stop."""
    for process in servers.values():
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_SECONDS
    for process in servers.values():
        while group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
            process.poll()  # reaps the command itself once it exits
        with contextlib.suppress(ProcessLookupError):  # ProcessLookupError: none is left
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def serve(settings: UiSettings) -> int:
    """Runs both servers until Ctrl-C (exit 130), SIGTERM (143) or one of them ends (3)."""
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    servers = start_servers(settings)
    print(
        f"Prefect UI: {settings.prefect_url}   MLflow UI: {experiment_link(settings)}   "
        "(Ctrl-C stops both)",
        flush=True,
    )
    ended: list[str] = []
    try:
        while not received and not ended:
            time.sleep(0.2)
            ended = [name for name, process in servers.items() if process.poll() is not None]
    finally:
        stop(servers)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("both servers stopped", flush=True)
    if received:
        return 128 + received[0]
    code = servers[ended[0]].returncode
    return fail(
        f"the {ended[0]} server exited on its own (code {code}); its output above says why",
        SERVICE_ERROR,
    )


def main(argv: list[str] | None = None, prog: str = "python -m flows.ui") -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv, prog)
    try:
        settings = settings_from(args)
    except ConfigError as error:
        return fail(error)
    return serve(settings)


if __name__ == "__main__":
    sys.exit(main())
