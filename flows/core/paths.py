"""Where a run writes, and the process environment that points Prefect and MLflow there.

Prefect reads its settings when it is first imported, so `configure_services` must run before
any `import prefect`; the CLI and the tests call it first thing.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from flows.core.logs import PROJECT_LOGGERS
from flows.core.settings import ConfigError, Settings

# The checkout (or install) root: conf/ and the deployments' entrypoints are found from here.
REPO_ROOT = Path(__file__).resolve().parents[2]


class PathSettings(Settings):
    """`paths.*`: the one root everything a run writes lives under."""

    section = "paths"

    root: str = ".cloze"
    """Everything a run writes: artifacts/, mlflow.db, mlartifacts/, prefect/."""


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @classmethod
    def from_settings(cls, settings: PathSettings) -> RunPaths:
        return cls(Path(settings.root).expanduser().resolve())

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.root / "mlartifacts"

    @property
    def logs(self) -> Path:
        """One file per CLI run (`<run name>.log`): every line, tracebacks included."""
        return self.root / "logs"

    @property
    def prefect_home(self) -> Path:
        return self.root / "prefect"

    def tracking_uri(self, configured: str | None) -> str:
        return configured or f"sqlite:///{self.root / 'mlflow.db'}"


def configure_services(
    paths: RunPaths, tracking_uri: str | None, request_timeout_seconds: int
) -> RunPaths:
    """Local Prefect and MLflow under the run root unless the user points at servers.

    Takes the validated `paths.*` and `tracking.*` values (see `flows.plan.RunConfig`).
    """
    check_writable(paths)
    if not os.environ.get("PREFECT_API_URL"):
        os.environ.setdefault("PREFECT_HOME", str(paths.prefect_home))
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", ",".join(PROJECT_LOGGERS))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Content hashes of corpus files, reused while a file is unchanged (flows/corpora/hashing.py).
    os.environ.setdefault("CLOZE_HASH_CACHE", str(paths.root / "cache" / "file-hashes.json"))
    # The temporary server's default 20 s start-up budget is too short on a loaded machine or
    # when a second run starts beside this one (measured: both of two concurrent runs timed out).
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    # Prefect's client retries a lost API 5 times at 2, 4, ... 32 s: about a minute per call, and
    # an outage fails several calls in a row. With 3 (2 + 4 + 8 s per call) a run stopped 75-80 s
    # after its running stage finished (measured, tests/integration/test_tracking_outage.py).
    os.environ.setdefault("PREFECT_CLIENT_MAX_RETRIES", "3")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    # MLflow's "View run/experiment at" lines open its GenAI view; RunHandle.finish says its own.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # One retry layer: flows/tracking/retry.py retries whole MLflow calls within a deadline, so
    # MLflow's own HTTP retries (7 with exponential backoff, minutes per call) are switched off
    # and a request that hangs gives up after tracking.request_timeout_seconds.
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(request_timeout_seconds)
    # Lightning's MLFlowLogger reads this at import time; keep it consistent with the run.
    os.environ.setdefault("MLFLOW_TRACKING_URI", paths.tracking_uri(tracking_uri))
    return paths


def check_writable(paths: RunPaths) -> None:
    """Fails at once if the run root (and the folders under it that exist) cannot be written.

    Otherwise the first writer is Prefect's temporary server, which cannot create its database,
    and the run waits out the server's start-up timeout (120 s) to blame the Prefect server.
    """
    below = (paths.artifacts, paths.prefect_home, paths.root / "cache")
    for folder in (paths.root, *[folder for folder in below if folder.is_dir()]):
        try:
            make_writable_folder(folder)
        except OSError as error:
            raise ConfigError(
                f"paths.root={paths.root} is not writable: {folder} ({error.strerror}). Cloze "
                "keeps its artifacts, MLflow store and Prefect database there: set CLOZE_HOME "
                "(or paths.root=...) to a writable folder, or make this one writable."
            ) from error


def make_writable_folder(folder: Path) -> None:
    """Creates `folder` if need be and writes (then removes) a file in it: raises the OSError
    (read-only, no permission, full) a first real write would meet, before any work is done."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
        pass
