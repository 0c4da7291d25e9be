"""Where a run writes, and the process environment that points Prefect and MLflow there.

Prefect reads its settings when it is first imported, so `configure_services` must run before
any `import prefect`; the CLI and the tests call it first thing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> RunPaths:
        return cls(Path(config["paths"]["root"]).expanduser().resolve())

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.root / "mlartifacts"

    @property
    def prefect_home(self) -> Path:
        return self.root / "prefect"

    def tracking_uri(self, configured: str | None) -> str:
        return configured or f"sqlite:///{self.root / 'mlflow.db'}"


def configure_services(config: dict[str, Any]) -> RunPaths:
    """Local Prefect and MLflow under the run root unless the user points at servers."""
    paths = RunPaths.from_config(config)
    paths.root.mkdir(parents=True, exist_ok=True)
    if not os.environ.get("PREFECT_API_URL"):
        os.environ.setdefault("PREFECT_HOME", str(paths.prefect_home))
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "flows,lightning_modules,cloze")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # The temporary server's default 20 s start-up budget is too short on a loaded machine or
    # when a second run starts beside this one (measured: both of two concurrent runs timed out).
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # Lightning's MLFlowLogger reads this at import time; keep it consistent with the run.
    os.environ.setdefault("MLFLOW_TRACKING_URI", paths.tracking_uri(config["tracking"]["uri"]))
    return paths
