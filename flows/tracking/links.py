"""One name and two-way links between a Prefect flow run and its MLflow runs.

An operator moves between the Prefect UI (what ran, when, its logs) and the MLflow UI (figures,
curves, models). Both show the same run name, `<experiment>-<corpus or domain>-<UTC timestamp>`;
every MLflow run carries the Prefect run's id and page, and Prefect's summary links back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flows.core.redaction import redact_text

FLOW_RUN_ID_TAG = "prefect.flow_run_id"
FLOW_RUN_URL_TAG = "prefect.flow_run_url"
# MLflow 3 opens an experiment on its GenAI overview unless this tag says what kind it is.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
CUSTOM_MODEL_DEVELOPMENT = "custom_model_development"
# Where `make ui` serves the local stores: the run's own Prefect home and MLflow database.
LOCAL_PREFECT_UI = "http://127.0.0.1:4200"
LOCAL_MLFLOW_UI = "http://127.0.0.1:5000"
TIMESTAMP_FORMAT = "%Y%m%d-%H%M%S"


def experiment_override(overrides: list[str] | tuple[str, ...]) -> str | None:
    """The value of the last `experiment=<name>` override (Hydra's last one wins)."""
    values = [item.split("=", 1)[1] for item in overrides if item.startswith("experiment=")]
    return (values[-1] or None) if values else None


def corpus_label(corpus: dict[str, Any]) -> str:
    """A short name for the corpus: its first file or folder, its dataset name, or its kind."""
    if corpus.get("kind") == "files" and corpus.get("paths"):
        return Path(str(corpus["paths"][0]).rstrip("/*")).name or "files"
    if corpus.get("kind") == "huggingface" and corpus.get("name"):
        return str(corpus["name"]).rstrip("/").rsplit("/", 1)[-1]
    return str(corpus.get("kind", "corpus"))


def run_label(
    overrides: list[str] | tuple[str, ...], config: dict[str, Any], now: datetime | None = None
) -> str:
    """`<experiment>-<corpus or domain>-<UTC timestamp to the second>`.

    The experiment is the bundle asked for (`experiment=smoke`), else `tracking.experiment`;
    a refresh names its domain rather than the corpus folder.
    """
    experiment = experiment_override(overrides) or config["tracking"]["experiment"]
    domain = (config.get("refresh") or {}).get("domain")
    stamp = (now or datetime.now(UTC)).strftime(TIMESTAMP_FORMAT)
    return f"{experiment}-{domain or corpus_label(config['corpus'])}-{stamp}"


@dataclass(frozen=True)
class RunIdentity:
    """The name every MLflow run of one flow run starts with, and the tags that link back."""

    name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)

    def run_name(self, stage: str) -> str:
        """`<flow run name>/<stage>`: the MLflow UI's run list reads like Prefect's."""
        return f"{self.name}/{stage}" if self.name else stage


def prefect_ui_url(flow_run_id: str) -> str:
    """The flow run's page: the configured Prefect UI, or the local one `make ui` serves."""
    from prefect.utilities.urls import url_for

    return url_for("flow-run", obj_id=flow_run_id) or (
        f"{LOCAL_PREFECT_UI}/runs/flow-run/{flow_run_id}"
    )


def current_identity() -> RunIdentity:
    """The Prefect flow run this code runs in (none outside a flow run: plain names, no tags)."""
    from prefect.runtime import flow_run

    flow_run_id = flow_run.get_id()
    if flow_run_id is None:
        return RunIdentity()
    tags = {FLOW_RUN_ID_TAG: str(flow_run_id), FLOW_RUN_URL_TAG: prefect_ui_url(flow_run_id)}
    return RunIdentity(flow_run.get_name(), tags)


# MLflow 3's UI opens a browser on its GenAI view (traces, evaluations) unless told otherwise; the
# experiment's kind tag does not override a fresh browser's default (checked with Chromium).
MODEL_TRAINING_VIEW = "workflowType=machine_learning"


def mlflow_run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The run's page in the MLflow UI: the tracking server, or `make ui`'s for a local store."""
    # A link is shown and stored (Prefect artifacts, MLflow descriptions): never its password.
    base = (
        redact_text(tracking_uri.rstrip("/"))
        if tracking_uri.startswith("http")
        else LOCAL_MLFLOW_UI
    )
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{MODEL_TRAINING_VIEW}"


def stage_name(run_name: str) -> str:
    """`smoke-pydoc-20261201-080447/finetune/sst2` -> `sst2`: a run's own part of its name."""
    return run_name.rsplit("/", 1)[-1]
