"""A command line run stopped by SIGTERM or SIGINT: unwound like Ctrl-C, its runs marked KILLED,
one line that says how to resume, exit 128 + the signal (shared by `python -m flows` and
`python -m flows.lift`)."""

from __future__ import annotations

import signal

from flows.core.cli import fail


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT: unwinds the run like Ctrl-C, so every `finally` and atexit hook runs.

    Python's default SIGTERM ends the process at once: no run is marked failed and Prefect's
    temporary server, stopped only by an atexit hook, is left listening.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)


def stop_on_signals() -> None:
    """Turns the first SIGTERM or SIGINT into `Interrupted`; a second one acts as the default."""
    from flows.tracking.runs import note_stop_signal  # MLflow and Lightning: after validation

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        note_stop_signal(signum)
        raise Interrupted(signum)

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)


def stopped_by_signal() -> int | None:
    """The one line and exit code of a run stopped by SIGTERM or SIGINT; None for none."""
    from flows.tracking.runs import received_stop_signal

    signum = received_stop_signal()
    if signum is None:
        return None
    message = (
        f"stopped by {signal.Signals(signum).name}; the runs are marked KILLED. Rerun the same "
        "command to resume: finished stages are reused and pretraining resumes from its last "
        "checkpoint"
    )
    return fail(message, 128 + signum)
