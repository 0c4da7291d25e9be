"""Bounded retries around every MLflow call, then an error that says what to do.

One retry layer, not two. MLflow's own HTTP retries (urllib3: 7 retries with exponential backoff
and a 120 s timeout per request by default, minutes before an error surfaces) are switched off by
`configure_services`, and this policy retries whole client calls instead: it bounds the total
time (attempts, backoff, deadline), covers the local SQLite store as well as a server, and
turns the final failure into a message naming the tracking URI and the fix. The same wrapped
client is handed to Lightning's MLflow logger, so training-time logging follows the same policy.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

import requests

from flows.core.disk import is_disk_full
from flows.core.signals import stop_signals_deferred
from flows.tracking.temporary_server import TemporaryServerDidNotStart

log = logging.getLogger(__name__)
T = TypeVar("T")
# 5xx and rate limiting come and go; a 4xx (bad request, missing run) never heals by waiting.
TRANSIENT_HTTP_STATUS = frozenset({429, 500, 502, 503, 504})


class TrackingUnavailableError(RuntimeError):
    """MLflow stayed unreachable for the whole retry budget; the run stops here, nothing lost."""


def is_transient(error: BaseException) -> bool:
    """Connection refused or reset, a timeout, a server-side status that may clear, or a local
    SQLite store another process holds locked. Not a full disk: waiting rarely frees one."""
    from mlflow.exceptions import MlflowException  # here: the CLI reads this module before MLflow

    if is_disk_full(error):
        return False
    if isinstance(error, ConnectionError | TimeoutError | requests.RequestException):
        return True
    if is_locked_store(error):
        return True
    if isinstance(error, MlflowException):
        return error.get_http_status_code() in TRANSIENT_HTTP_STATUS
    return False


def is_insert_race(error: BaseException) -> bool:
    """Another run inserted the same shared row first: MLflow's server checks for a dataset,
    then inserts it, without a lock, so two runs logging one dataset at once (two pipelines on
    one store) can both insert, and the second fails on the unique key (PostgreSQL's `duplicate
    key value`, SQLite's `UNIQUE constraint failed`). The row exists now: the call, made again,
    links to it."""
    text = str(error)
    return "duplicate key value violates unique constraint" in text or (
        "UNIQUE constraint failed" in text
    )


def is_locked_store(error: BaseException) -> bool:
    """SQLite's `database is locked`, however MLflow and SQLAlchemy wrapped it: another process
    holds a write lock longer than SQLite's own busy timeout."""
    current: BaseException | None = error
    for _ in range(5):
        if current is None:
            return False
        if isinstance(current, sqlite3.OperationalError) and "database is locked" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


@dataclass(frozen=True)
class RetryPolicy:
    """`tracking.retry_*`: how long a tracking call may keep failing before the run stops.

    A failing call is tried `attempts` times, sleeping `backoff_seconds` and then twice as long
    after each failure, and not retried once `deadline_seconds` have passed since its first try.
    Its ranges are checked where it is configured (`TrackingSettings`).
    """

    attempts: int = 5
    backoff_seconds: float = 1.0
    deadline_seconds: float = 60.0

    def delays(self) -> list[float]:
        """The sleeps between attempts, before the deadline trims them."""
        return [self.backoff_seconds * 2**n for n in range(self.attempts - 1)]


class RetryingClient:
    """An `MlflowClient` whose every method call goes through a `RetryPolicy`.

    Once the budget of one call is spent the server counts as down: later calls (marking runs
    FAILED on the way out) get a single try, so a failing run stops within about one deadline
    instead of one per call.

    On a local SQLite store each attempt holds SIGTERM and SIGINT until it returns. A stop
    signal raised midway through one of MLflow's reads leaves that read's cursor open, kept
    alive by the exception's traceback, and an open cursor keeps SQLite's shared lock through a
    rollback (Python 3.11): the run's own next write, marking it KILLED, then waited out the
    whole retry budget on its own lock (CI, a SIGTERM to the run's process group) and the run
    ended FAILED. A server's calls stay interruptible: a dropped request holds no lock.
    """

    def __init__(
        self,
        client: Any,
        policy: RetryPolicy,
        tracking_uri: str,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`clock` and `sleep` are the real ones; a test passes a fake pair to check the budget
        without waiting for it."""
        self._client = client
        self._policy = policy
        self._tracking_uri = tracking_uri
        self._clock = clock
        self._sleep = sleep
        self._outage: TrackingUnavailableError | None = None

    @classmethod
    def connect(cls, tracking_uri: str, policy: RetryPolicy) -> RetryingClient:
        """An `MlflowClient` for `tracking_uri`, opened under the policy too: opening a SQLite
        store reads (and may migrate) its schema, the first place a lock shows."""
        from mlflow.tracking import MlflowClient

        retrying = cls(None, policy, tracking_uri)
        retrying._client = retrying._call("open the store", lambda: MlflowClient(tracking_uri))
        return retrying

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            # Unpickling (DDP spawn carries the MLflow logger) asks before `_client` is restored.
            raise AttributeError(name)
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, functools.partial(attribute, *args, **kwargs))

        return call

    def _call(self, name: str, function: Callable[[], T]) -> T:
        started = self._clock()
        delays = [] if self._outage else self._policy.delays()
        for attempt, delay in enumerate([*delays, None], start=1):
            try:
                with self._one_attempt():
                    result = function()
            except Exception as error:
                if not is_transient(error):
                    raise
                elapsed = self._clock() - started
                if delay is None or elapsed + delay > self._policy.deadline_seconds:
                    # Later failures repeat the first one's account: its budget is the story.
                    self._outage = self._outage or self._unavailable(name, attempt, elapsed, error)
                    raise TrackingUnavailableError(str(self._outage)) from error
                log.warning(
                    "MLflow %s failed (%s); retry %d in %.1f s", name, error, attempt, delay
                )
                self._sleep(delay)
            else:
                self._outage = None
                return result
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _one_attempt(self) -> AbstractContextManager[None]:
        """A stop signal waits for a local store's call to return (see the class)."""
        local = self._tracking_uri.startswith("sqlite:")
        return stop_signals_deferred() if local else nullcontext()

    def _unavailable(
        self, name: str, attempts: int, elapsed: float, error: BaseException
    ) -> TrackingUnavailableError:
        uri = self._tracking_uri
        spent = f"{attempts} attempt(s) over {elapsed:.1f} s"
        if is_locked_store(error):
            return TrackingUnavailableError(
                f"the MLflow store {uri.removeprefix('sqlite:///')} is locked: another process "
                f"holds it (database is locked; {name}, {spent}). Let that process finish or stop "
                "it, or point tracking.uri at an MLflow server to share one store between "
                "processes, then rerun: finished stages are reused and pretraining resumes from "
                "its last checkpoint (raise tracking.retry_deadline_seconds to wait longer)."
            )
        return TrackingUnavailableError(
            f"MLflow at {uri} did not answer {name} ({spent}; "
            f"last error: {str(error)[:300]}). Start the tracking server or check "
            f"tracking.uri={uri}, then rerun: finished stages are reused and pretraining resumes "
            "from its last checkpoint (raise tracking.retry_deadline_seconds to wait longer)."
        )


def service_outage_message(error: BaseException) -> str | None:
    """What to do when the Prefect or MLflow server went away mid-run; None for other errors."""
    cause: BaseException | None = error
    for _ in range(5):  # an outage may surface wrapped, or while handling an earlier error
        if cause is None:
            return None
        if isinstance(cause, TrackingUnavailableError | TemporaryServerDidNotStart):
            return str(cause)
        if is_lost_prefect_api(cause):
            return (
                f"the Prefect API at {os.environ['PREFECT_API_URL']} stopped answering "
                f"({type(cause).__name__}: {cause}). Start the Prefect server, or unset "
                "PREFECT_API_URL to run with a local one, then rerun: finished stages are reused "
                "and pretraining resumes from its last checkpoint."
            )
        cause = cause.__cause__ or cause.__context__
    return None


def lost_prefect_api(error: BaseException) -> bool:
    """Whether `error`, or one of its causes, is the configured Prefect server not answering,
    or the temporary one never coming up: either way no Prefect API is left to report to."""
    cause: BaseException | None = error
    for _ in range(5):
        if cause is None:
            return False
        if isinstance(cause, TemporaryServerDidNotStart) or is_lost_prefect_api(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def is_lost_prefect_api(error: BaseException) -> bool:
    import httpx  # Prefect's HTTP client; imported here, after configure_services

    api = os.environ.get("PREFECT_API_URL")
    return (
        bool(api)
        and isinstance(error, httpx.TransportError)
        and requested(error).startswith(str(api))
    )


def requested(error: Any) -> str:
    """The URL an httpx error was about ('' if none): other libraries use httpx too."""
    try:
        return str(error.request.url)
    except RuntimeError:  # raised without a request attached
        return ""
