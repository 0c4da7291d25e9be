"""Prefect's temporary server, started so that Ctrl-C stops the run and not the server first.

A terminal sends Ctrl-C's SIGINT to the whole foreground process group, and the temporary server
(a uvicorn child Prefect starts on first use when no `PREFECT_API_URL` is set) is in that group.
It shut down at once, and the run then spent minutes retrying the dead API while reporting its
final states, printing connection tracebacks. Blocking SIGINT in the child keeps it serving
until the run has ended; Prefect's own at-exit hook still stops it with SIGTERM, and a SIGKILL
of the group still reaches it, so no process outlives the run. Uvicorn installs handlers but
does not unblock signals, and a blocked signal's mask survives `exec`.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def keep_temporary_server_through_ctrl_c() -> None:
    """Registers the server Prefect will start, so that it ignores SIGINT. Call before any
    Prefect client is made. With an external server (`PREFECT_API_URL`) there is none to start.
    """
    if os.environ.get("PREFECT_API_URL"):
        return
    from prefect.server.api.server import SubprocessASGIServer

    class CtrlCProofServer(SubprocessASGIServer):
        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:  # the child inherits the mask of the thread that starts it
                return super()._run_uvicorn_command()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    # `SubprocessASGIServer()` returns the instance registered for its port (None: any free
    # one), so every later use by Prefect gets this one.
    CtrlCProofServer()
