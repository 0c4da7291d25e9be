"""Prefect's temporary server, bound to the run that starts it: it never outlives the run,
whatever signal the run gets, and it answers until the run has reported its final states.

Prefect starts a uvicorn child as its temporary API server when no `PREFECT_API_URL` is set.
As Prefect starts it, three faults got through:

- Signals to the run's process group (Ctrl-C in a terminal, `timeout`, systemd, Kubernetes and
  SLURM all signal the group) reached the server too, which died first: the run then retried a
  dead API for a minute and more, printed connection tracebacks and left its flow run RUNNING.
  Here the server starts in its own session, so only the run is signalled; Prefect's at-exit
  hook stops the server once the run has reported.
- A SIGKILL of the run alone (the OOM killer's) left the server listening for good. Here a
  watchdog thread in the server's process (`python -m flows.tracking.temporary_server <pid>
  ...`) ends it when the process that started it is gone.
- Two first runs on one fresh home raced to create the Prefect database (`duplicate column
  name`, `no such table`). Here a start holds the project's file lock in the Prefect home until
  its server answers, so the second server finds the database made.

A server that does not answer within its start-up budget is `TemporaryServerDidNotStart`: the
CLI prints one line and exits 3, and later clients (at-exit log drains) get the same error at
once instead of starting another server and waiting out the budget again.
"""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from flows.core.artifacts import file_lock

# How often the watchdog looks for the run, and how long the server may take to stop after.
WATCH_SECONDS = 0.5
STOP_GRACE_SECONDS = 10.0
START_LOCK = ".temporary-server-start.lock"


class TemporaryServerDidNotStart(RuntimeError):
    """The temporary Prefect server did not answer within its start-up budget."""


def bind_temporary_server_to_this_run() -> None:
    """Registers the server Prefect will start as a run-bound one. Call before any Prefect
    client is made; with an external server (`PREFECT_API_URL`) there is none to start."""
    if os.environ.get("PREFECT_API_URL"):
        return
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

    class RunBoundServer(SubprocessASGIServer):
        failure: str | None = None

        def start(self, timeout: int | None = None) -> None:
            if self.failure is not None:  # one wait per run, not one per client
                raise TemporaryServerDidNotStart(self.failure)
            if self.running:
                return
            budget = timeout or PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()
            with file_lock(prefect_home() / START_LOCK):
                try:
                    super().start(timeout)
                except RuntimeError as error:
                    self.failure = did_not_start(budget, error)
                    self.stop_process()
                    raise TemporaryServerDidNotStart(self.failure) from error

        def stop_process(self) -> None:
            if self.server_process is not None and self.server_process.poll() is None:
                self.server_process.kill()
                self.server_process.wait()

        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            return start_bound_server(self.port)

    # `SubprocessASGIServer()` returns the instance registered for its port (None: any free
    # one), so every later use by Prefect gets this one.
    RunBoundServer()


def prefect_home() -> Path:
    from prefect.settings import get_current_settings

    return Path(get_current_settings().home).expanduser()


def did_not_start(budget: float, error: BaseException) -> str:
    return (
        f"the temporary Prefect server did not answer within {budget:g} s ({error}); the "
        "machine may be overloaded: rerun (finished stages are reused), raise "
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, or start a server (`make ui` or "
        "`prefect server start`) and set PREFECT_API_URL=http://127.0.0.1:4200/api"
    )


def start_bound_server(port: int | None) -> subprocess.Popen[Any]:
    """Prefect's own uvicorn command for its temporary server (as
    `SubprocessASGIServer._run_uvicorn_command` builds it), run under this module's watchdog in
    a session of its own."""
    import prefect
    from prefect.settings import get_current_settings

    uvicorn = ["--app-dir", str(prefect.__module_path__.parent)]
    uvicorn += ["--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1"]
    uvicorn += ["--port", str(port), "--log-level", "error", "--lifespan", "on"]
    server_env = {
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", __name__, str(os.getpid()), *uvicorn],
        env={
            **os.environ,
            **server_env,
            **get_current_settings().to_environment_variables(exclude_unset=True),
        },
        start_new_session=True,  # the run's group signals are the run's, not the server's
    )


def watch(run: int) -> None:
    """Ends this process once the run that started it is gone (it is re-parented then)."""
    while os.getppid() == run:
        time.sleep(WATCH_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's own graceful shutdown
    time.sleep(STOP_GRACE_SECONDS)
    os._exit(1)


def main(argv: list[str]) -> None:
    """`python -m flows.tracking.temporary_server <run pid> <uvicorn arguments...>`."""
    run, uvicorn = int(argv[0]), argv[1:]
    threading.Thread(target=watch, args=(run,), name="run-watchdog", daemon=True).start()
    sys.argv = ["uvicorn", *uvicorn]
    runpy.run_module("uvicorn", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
