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
    experiment: str = "cloze"
    registered_model: str | None = "cloze-encoder"
    retry_attempts: Annotated[int, bounds(ge=1)] = 5  # 1 means no retries
    retry_backoff_seconds: Annotated[Number, bounds(ge=0)] = 1.0
    retry_deadline_seconds: Annotated[Number, bounds(gt=0)] = 60.0
    request_timeout_seconds: Annotated[int, bounds(ge=1)] = 30

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
