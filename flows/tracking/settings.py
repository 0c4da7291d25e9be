"""`tracking.*`, apart from the client: the CLI checks it before MLflow or Prefect is imported."""

from __future__ import annotations

from typing import Annotated

from pydantic import field_validator

from flows.core.settings import ConfigError, Number, Settings, bounds
from flows.tracking.retry import RetryPolicy


class TrackingSettings(Settings):
    """`tracking.*`."""

    section = "tracking"
    uri: str | None = None
    """MLflow: a server (http://127.0.0.1:5000) or store URI; null: sqlite under paths.root."""
    experiment: str = "cloze"
    """The MLflow experiment runs are recorded in."""
    registered_model: str | None = "cloze-encoder"
    """Registry name each newly trained encoder is registered under; null: no registration."""
    retry_attempts: Annotated[int, bounds(ge=1)] = 5
    """Tries of each MLflow call against an unreachable store (1: no retries)."""
    retry_backoff_seconds: Annotated[Number, bounds(ge=0)] = 1.0
    """Sleep before the first retry, doubling after each."""
    retry_deadline_seconds: Annotated[Number, bounds(gt=0)] = 60.0
    """Never retry past this; then the run stops, naming the URI (a rerun continues)."""
    request_timeout_seconds: Annotated[int, bounds(ge=1)] = 30
    """One HTTP request to a tracking server."""

    @field_validator("experiment")
    @classmethod
    def _named(cls, experiment: str) -> str:
        if not experiment:
            raise ConfigError("tracking.experiment must be a non-empty name")
        return experiment

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            self.retry_attempts, self.retry_backoff_seconds, self.retry_deadline_seconds
        )
