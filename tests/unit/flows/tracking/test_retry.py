"""The tracking retry policy: transient failures retried within a budget, then a clear error."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy.exc
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, TEMPORARILY_UNAVAILABLE

from flows.core.settings import ConfigError, settings_from
from flows.tracking.retry import (
    RetryingClient,
    RetryPolicy,
    TrackingUnavailableError,
    service_outage_message,
)
from flows.tracking.runs import Tracker, TrackingSettings
from tests.fakes import FakeClock
from tests.integration.servers import free_port

URI = "http://127.0.0.1:9"


class FlakyClient:
    """Injects a fault: `log_batch` raises `failures` times, then answers."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or ConnectionError("connection refused")
        self.calls = 0

    def log_batch(self, run_id: str, **kwargs: Any) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return f"logged {run_id}"


def test_a_call_that_fails_twice_then_answers_succeeds_after_two_backoffs(
    clock: FakeClock,
) -> None:
    flaky = FlakyClient(failures=2)
    policy = RetryPolicy(attempts=3, backoff_seconds=0.05)
    client = RetryingClient(flaky, policy, URI, clock, clock.sleep)
    assert client.log_batch("run-1", metrics=[]) == "logged run-1"
    assert flaky.calls == 3
    assert clock.slept == [0.05, 0.1]  # the backoff, then twice that


def test_a_call_that_keeps_failing_stops_after_its_attempts_with_the_fix_in_the_message() -> None:
    flaky = FlakyClient(failures=100)
    client = RetryingClient(flaky, RetryPolicy(attempts=3, backoff_seconds=0.01), URI)
    with pytest.raises(TrackingUnavailableError) as raised:
        client.log_batch("run-1")
    assert flaky.calls == 3
    message = str(raised.value)
    assert f"MLflow at {URI} did not answer log_batch (3 attempt(s)" in message
    assert f"check tracking.uri={URI}, then rerun: finished stages are reused" in message
    assert isinstance(raised.value.__cause__, ConnectionError)


def test_the_deadline_cuts_retries_short_of_the_attempts(clock: FakeClock) -> None:
    flaky = FlakyClient(failures=100)
    policy = RetryPolicy(attempts=10, backoff_seconds=0.2, deadline_seconds=0.5)
    with pytest.raises(TrackingUnavailableError, match=r"\(2 attempt\(s\)"):
        RetryingClient(flaky, policy, URI, clock, clock.sleep).log_batch("run-1")
    assert flaky.calls == 2  # 0.2 s slept; the next 0.4 s would end past the 0.5 s deadline
    assert clock.slept == [0.2]


def test_after_giving_up_later_calls_try_once_until_one_succeeds() -> None:
    flaky = FlakyClient(failures=4)
    client = RetryingClient(flaky, RetryPolicy(attempts=3, backoff_seconds=0.01), URI)
    with pytest.raises(TrackingUnavailableError) as first:
        client.log_batch("run-1")
    with pytest.raises(TrackingUnavailableError) as second:
        client.log_batch("run-2")
    assert flaky.calls == 4  # one try for the second call
    assert str(second.value) == str(first.value)  # which names the first call and its budget
    assert "did not answer log_batch (3 attempt(s)" in str(second.value)
    assert client.log_batch("run-1") == "logged run-1"  # the server is back: full budget again


def test_errors_that_waiting_cannot_fix_are_raised_at_once_and_unchanged() -> None:
    exists = MlflowException("exists", error_code=RESOURCE_ALREADY_EXISTS)
    flaky = FlakyClient(failures=1, error=exists)
    client = RetryingClient(flaky, RetryPolicy(attempts=5, backoff_seconds=0.01), URI)
    with pytest.raises(MlflowException) as raised:
        client.log_batch("run-1")
    assert raised.value is exists and flaky.calls == 1


def test_server_errors_are_retried() -> None:
    unavailable = MlflowException("busy", error_code=TEMPORARILY_UNAVAILABLE)
    flaky = FlakyClient(failures=1, error=unavailable)
    client = RetryingClient(flaky, RetryPolicy(attempts=2, backoff_seconds=0.01), URI)
    assert client.log_batch("run-1") == "logged run-1"


def locked_store_error() -> sqlalchemy.exc.OperationalError:
    """What opening a SQLite store that another process holds raises: SQLite's error, wrapped
    by SQLAlchemy (not an MlflowException, so no HTTP status tells it is transient)."""
    try:
        raise sqlite3.OperationalError("database is locked")
    except sqlite3.OperationalError as cause:
        error = sqlalchemy.exc.OperationalError("SELECT 1", {}, cause)
        error.__cause__ = cause
        return error


def test_a_locked_sqlite_store_is_retried_and_a_lock_released_in_time_heals() -> None:
    flaky = FlakyClient(failures=2, error=locked_store_error())
    client = RetryingClient(flaky, RetryPolicy(attempts=3, backoff_seconds=0.01), "sqlite:///x")
    assert client.log_batch("run-1") == "logged run-1"
    assert flaky.calls == 3


def test_a_store_that_stays_locked_names_the_file_and_the_other_process(tmp_path: Path) -> None:
    database = tmp_path / "mlflow.db"
    flaky = FlakyClient(failures=100, error=locked_store_error())
    policy = RetryPolicy(attempts=2, backoff_seconds=0.01)
    with pytest.raises(TrackingUnavailableError) as raised:
        RetryingClient(flaky, policy, f"sqlite:///{database}").log_batch("run-1")
    assert flaky.calls == 2
    assert str(raised.value).startswith(
        f"the MLflow store {database} is locked: another process holds it (database is locked; "
        "log_batch, 2 attempt(s)"
    )
    assert "Start the tracking server" not in str(raised.value)


def test_a_real_client_on_a_closed_port_fails_within_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # as configure_services sets it
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(TrackingUnavailableError) as raised:
        Tracker(uri, "cloze", None, RetryPolicy(attempts=3, backoff_seconds=0.1))
    assert f"MLflow at {uri} did not answer get_experiment_by_name (3 attempt(s)" in str(
        raised.value
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("retry_attempts", 0, "tracking.retry_attempts=0 must be at least 1"),
        ("retry_backoff_seconds", -1.0, "tracking.retry_backoff_seconds=-1.0 must be at least 0"),
        (
            "retry_deadline_seconds",
            0.0,
            "tracking.retry_deadline_seconds=0.0 must be greater than 0",
        ),
        ("request_timeout_seconds", 0, "tracking.request_timeout_seconds=0 must be at least 1"),
    ],
)
def test_bad_retry_settings_name_the_key(key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_from(TrackingSettings, {key: value}, "tracking")
    assert str(raised.value) == message


def test_the_cli_explains_a_lost_prefect_or_mlflow_server_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    lost_mlflow = TrackingUnavailableError("MLflow at http://x did not answer log_batch")
    assert service_outage_message(lost_mlflow) == str(lost_mlflow)
    try:
        try:
            request = httpx.Request("POST", "http://127.0.0.1:4200/api/task_runs/1/set_state")
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        except httpx.ConnectError as error:
            raise RuntimeError("flow run crashed") from error
    except RuntimeError as wrapped:
        message = service_outage_message(wrapped)
    assert message == (
        "the Prefect API at http://127.0.0.1:4200/api stopped answering (ConnectError: "
        "[Errno 111] Connection refused). Start the Prefect server, or unset PREFECT_API_URL to "
        "run with a local one, then rerun: finished stages are reused and pretraining resumes "
        "from its last checkpoint."
    )
    assert service_outage_message(ValueError("a bug")) is None
    elsewhere = httpx.Request("GET", "https://huggingface.co/api/datasets/x")
    assert service_outage_message(httpx.ConnectError("refused", request=elsewhere)) is None
