"""A command line run stopped by SIGTERM or SIGINT: unwound like Ctrl-C, its MLflow runs marked
KILLED and its Prefect flow run Cancelled, one line that says how to resume, exit 128 + the
signal (shared by `python -m flows` and `python -m flows.lift`)."""

from __future__ import annotations

import logging
import signal
from uuid import UUID

from flows.core.cli import fail

log = logging.getLogger(__name__)
# The Prefect flow runs this process started (`note_flow_run`): the ones a signal cancels.
FLOW_RUNS: list[UUID] = []


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


def note_flow_run() -> None:
    """Called in a flow run: it is one this process answers for if a signal stops it."""
    from prefect.runtime import flow_run

    if (flow_run_id := flow_run.get_id()) is not None:
        FLOW_RUNS.append(UUID(str(flow_run_id)))


def cancel_flow_runs(signum: int) -> None:
    """Marks the flow runs this process started, and their unfinished or crashed task runs,
    Cancelled: an operator's stop. Prefect's engine leaves them Crashed ("Execution was aborted
    by Python system exit call", orange in its UI), while MLflow says KILLED. Best effort: a
    server that is gone leaves them as they are."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.states import Cancelled

    message = f"stopped by {signal.Signals(signum).name}; rerun the same command to resume"
    try:
        with get_client(sync_client=True) as client:
            for flow_run_id in FLOW_RUNS:
                flow_run = client.read_flow_run(flow_run_id)
                if flow_run.state is None or flow_run.state.is_completed():
                    continue
                client.set_flow_run_state(flow_run_id, Cancelled(message=message), force=True)
                ours = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id]))
                for task_run in client.read_task_runs(flow_run_filter=ours):
                    if task_run.state is None or task_run.state.is_completed():
                        continue
                    if task_run.state.is_failed():
                        continue  # a task that failed on its own keeps its state
                    client.set_task_run_state(task_run.id, Cancelled(message=message), force=True)
    except Exception as error:  # the server stopped first: the runs stay Crashed
        log.debug("could not mark the flow runs Cancelled: %s", error)
    FLOW_RUNS.clear()


def stopped_by_signal() -> int | None:
    """The one line and exit code of a run stopped by SIGTERM or SIGINT; None for none."""
    from flows.tracking.runs import received_stop_signal

    signum = received_stop_signal()
    if signum is None:
        return None
    cancel_flow_runs(signum)
    message = (
        f"stopped by {signal.Signals(signum).name}; the runs are marked KILLED. Rerun the same "
        "command to resume: finished stages are reused and pretraining resumes from its last "
        "checkpoint"
    )
    return fail(message, 128 + signum)
