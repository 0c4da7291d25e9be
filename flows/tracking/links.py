"""One name and two-way links between a Prefect flow run and its MLflow runs.

An operator moves between the Prefect UI (what ran, when, its logs) and the MLflow UI (figures,
curves, models). Both show the same run name, `<UTC start MMDD-HHMMSS>-<model>[-<experiment>]-
<corpus or domain>`; every MLflow run carries the Prefect run's id and page (a tag, and a link in
its description), and Prefect's summary links back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flows.core.redaction import redact_text

FLOW_RUN_ID_TAG = "prefect.flow_run_id"
FLOW_RUN_URL_TAG = "prefect.flow_run_url"
# The run's description in the MLflow UI (markdown): a tag value is not clickable, a link here is.
DESCRIPTION_TAG = "mlflow.note.content"
# MLflow 3 opens an experiment on its GenAI overview unless this tag says what kind it is.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
CUSTOM_MODEL_DEVELOPMENT = "custom_model_development"
# Where `make ui` serves the local stores: the run's own Prefect home and MLflow database.
LOCAL_PREFECT_UI = "http://127.0.0.1:4200"
LOCAL_MLFLOW_UI = "http://127.0.0.1:5000"
# Month, day and time to the second: the year is in MLflow's Created column and Prefect's start.
TIMESTAMP_FORMAT = "%m%d-%H%M%S"
GLOB_CHARACTERS = set("*?[")


def experiment_override(overrides: list[str] | tuple[str, ...]) -> str | None:
    """The value of the last `experiment=<name>` override (Hydra's last one wins)."""
    values = [item.split("=", 1)[1] for item in overrides if item.startswith("experiment=")]
    return (values[-1] or None) if values else None


def corpus_label(corpus: dict[str, Any]) -> str:
    """What a person calls the corpus: its first path's (`path_label`), its Hub dataset's name
    without the owner (`wikimedia/wikipedia` -> `wikipedia`), or its kind (`pydoc`)."""
    if corpus.get("kind") == "files" and corpus.get("paths"):
        return path_label(str(corpus["paths"][0])) or "files"
    if corpus.get("kind") == "huggingface" and corpus.get("name"):
        return str(corpus["name"]).rstrip("/").rsplit("/", 1)[-1]
    return str(corpus.get("kind", "corpus"))


def path_label(path: str) -> str:
    """A glob's folder (`/data/pubmed/*.PubTator.txt` -> `pubmed`), a file's stem without its
    suffixes (`/data/abstracts.jsonl.gz` -> `abstracts`), a folder's name (`/data/wiki/AA`)."""
    parts = Path(path.rstrip("/")).parts
    wild = next((i for i, part in enumerate(parts) if GLOB_CHARACTERS & set(part)), None)
    if wild is not None:
        return parts[wild - 1].strip("/") if wild > 0 else ""
    name = parts[-1] if parts else ""
    return name.split(".", 1)[0] or name  # a dotfile keeps its name


def run_label(
    overrides: list[str] | tuple[str, ...], config: dict[str, Any], now: datetime | None = None
) -> str:
    """`<UTC start MMDD-HHMMSS>-<model>[-<experiment>]-<corpus or domain>`, e.g.
    `1202-230637-bert-mini-smoke-pubmed`.

    The start time comes first: MLflow's runs table shows about 17 characters of a name, and
    the runs of one experiment mostly share the rest (model first, then the timestamp, showed
    `bert-tiny-smoke-pyd…` in every row); a run started another second differs within 11. The
    experiment is the bundle asked for (`experiment=smoke`), if any; a refresh names its domain
    rather than the corpus folder.
    """
    model = str((config.get("model") or {}).get("name") or "model")
    experiment = experiment_override(overrides)
    domain = (config.get("refresh") or {}).get("domain")
    stamp = (now or datetime.now(UTC)).strftime(TIMESTAMP_FORMAT)
    parts = [stamp, model, experiment, domain or corpus_label(config["corpus"])]
    return "-".join(part for part in parts if part)


# What a run is within its flow run, whatever its display name: `pipeline`, `domain-refresh`,
# `pretrain`, `finetune-challenger`, `finetune/pydoc_topics` (a task's run under its stage's).
ROLE_TAG = "cloze.run"


def stage_title(stage: str, seed: int | None = None) -> str:
    """A stage's run name in both UIs: `tokenizer`, `pretrain seed 0` (a stage with one seed)."""
    return stage if seed is None else f"{stage} seed {seed}"


def child_title(role: str) -> str:
    """A child run's name: what sets it apart from its siblings, first, because MLflow's runs
    table shows about 17 characters of a top-level name and 11 of a task's, nested two levels
    deep. A stage run keeps its role (`shards`), an arm's stage names the arm first
    (`finetune-challenger` -> `challenger finetune`); a task's run is its task, after the arm
    where there is one (`finetune-challenger/ncbi_disease` -> `challenger ncbi_disease`)."""
    stage, _, task = role.rpartition("/")
    kind, _, arm = (stage or role).partition("-")
    if not stage:
        return f"{arm} {kind}" if arm else role
    return f"{arm} {task}" if arm else task


@dataclass(frozen=True)
class RunIdentity:
    """The flow run's name, which its MLflow parent run takes, and the tags that link back."""

    name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)

    def run_name(self, role: str, top_level: bool, title: str | None = None) -> str:
        """The parent run takes the flow run's name (`<time>-<model>[-<experiment>]-<corpus>`);
        a child nests under it in MLflow's table, so its name starts with what sets it apart
        there (the stage, the task and the arm), within the ~24 characters the table shows."""
        if top_level:
            return self.name or role
        return title or child_title(role)


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
    name, url = flow_run.get_name(), prefect_ui_url(flow_run_id)
    tags = {
        FLOW_RUN_ID_TAG: str(flow_run_id),
        FLOW_RUN_URL_TAG: url,
        DESCRIPTION_TAG: prefect_link(name or str(flow_run_id), url),
    }
    return RunIdentity(name, tags)


def prefect_link(name: str, url: str) -> str:
    """The markdown a run's description holds: its Prefect flow run, one click away."""
    label = re.sub(r"([\\\[\]])", r"\\\1", name)  # a bracket in a corpus name ends no link
    return f"Prefect flow run [{label}]({url})"


# MLflow 3.17's UI picks GenAI or model-training menus from the browser, not the experiment: the
# `workflowType` URL parameter, else the browser's localStorage (`mlflow.workflowType_v1`, set
# only by the sidebar's toggle), else GenAI. Its workflow-based navigation flag is compiled in as
# on, which makes the experiment's `mlflow.experimentKind` tag unread for that choice
# (docs/guides/deployments.md). So every link Cloze prints or stores carries the parameter.
MODEL_TRAINING_VIEW = "workflowType=machine_learning"


def mlflow_ui_base(tracking_uri: str) -> str:
    """The MLflow UI: the tracking server itself, or `make ui`'s for a local store. A link is
    shown and stored (Prefect artifacts, MLflow descriptions): never its password."""
    if tracking_uri.startswith("http"):
        return redact_text(tracking_uri.rstrip("/"))
    return LOCAL_MLFLOW_UI


def mlflow_run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The run's page in the MLflow UI, with model-training menus."""
    base = mlflow_ui_base(tracking_uri)
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{MODEL_TRAINING_VIEW}"


def mlflow_experiment_url(tracking_uri: str, experiment_id: str) -> str:
    """The experiment's runs table (its default page would redirect to the GenAI overview)."""
    base = mlflow_ui_base(tracking_uri)
    return f"{base}/#/experiments/{experiment_id}/runs?{MODEL_TRAINING_VIEW}"


def stage_name(run_name: str) -> str:
    """`smoke-pydoc-20261201-080447/finetune/sst2` -> `sst2`: a run's own part of its name."""
    return run_name.rsplit("/", 1)[-1]


def run_role(tags: dict[str, str], run_name: str) -> str:
    """What a run is (`pipeline`, `pretrain`, `sst2`): its role's last part, or, for a run of an
    older store (named `<flow run name>/<role>`, no role tag), its name's."""
    return stage_name(tags.get(ROLE_TAG) or run_name)
