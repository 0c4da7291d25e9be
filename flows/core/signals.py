"""A write that a repeated stop signal must not cut: SIGTERM and SIGINT deferred until it is done.

A served flow run is stopped with SIGTERM, and Prefect's runner can send SIGTERM again to a
process still alive while it shuts down (its process manager kills survivors on exit). Prefect
turns every SIGTERM into an exception; one that lands inside the MLflow call that writes a run's
final status leaves that run RUNNING after everything else has ended (seen once, under load: the
pretrain run KILLED, the pipeline run still RUNNING). Deferred, the signal is raised again as soon
as the write returns, so the stop still happens and a second Ctrl-C still forces, one call later.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """Holds SIGTERM and SIGINT for the block, then raises the first that arrived.

    Python runs signal handlers only in the main thread and only from there can they be swapped,
    so elsewhere (and where a handler was not set from Python) the block runs unguarded.
    """
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    if threading.current_thread() is not threading.main_thread() or None in previous.values():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, hold)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if received:
            signal.raise_signal(received[0])
