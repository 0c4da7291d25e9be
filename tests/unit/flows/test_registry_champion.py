"""The registry and its defaults agree (issue 53, case 23): the first registered version of a
model had no alias while the `distill` deployment's default teacher is
`models:/cloze-encoder@champion`, and only the pretrain child run named the registered model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from flows.core.artifacts import ArtifactRef
from flows.core.config import CONF_DIR
from flows.deploy.settings import DeploySettings
from flows.orchestration.registry import publish_model
from flows.stages.init_source import HUGGINGFACE_DIR
from flows.tracking.runs import Tracker

NAME = "cloze-encoder"


def trained(folder: Path, key: str) -> ArtifactRef:
    """A freshly computed pretrain artifact with its Hugging Face export."""
    (folder / HUGGINGFACE_DIR).mkdir(parents=True)
    (folder / HUGGINGFACE_DIR / "config.json").write_text("{}")
    return ArtifactRef("pretrain", key, folder, {}, False)


def pipeline_run(tracker: Tracker, folder: Path, key: str) -> tuple[Any, Any]:
    """One pipeline run that pretrains and registers: its parent and pretrain runs."""
    parent = tracker.start_run("pipeline")
    pretrain = tracker.start_run("pretrain", parent)
    publish_model(tracker, parent, pretrain, trained(folder, key), NAME, "a test encoder")
    return parent, pretrain


def test_the_first_version_is_the_champion_the_distill_deployment_names(tmp_path: Path) -> None:
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "cloze", tmp_path / "artifacts")
    first, _ = pipeline_run(tracker, tmp_path / "a", "k1")
    second, _ = pipeline_run(tracker, tmp_path / "b", "k2")
    client = MlflowClient(tracker.tracking_uri)
    # The distill deployment's default teacher resolves: to the first version, kept there.
    default = DeploySettings.load(CONF_DIR / "deploy" / "default.yaml").deployments["distill"]
    assert f"distill.teacher=models:/{NAME}@champion" in default.overrides
    assert str(client.get_model_version_by_alias(NAME, "champion").version) == "1"
    # The parent run, the one a person opens, names its registered version.
    assert client.get_run(first.run_id).data.tags["cloze.registered_model"] == f"{NAME}/1"
    assert client.get_run(second.run_id).data.tags["cloze.registered_model"] == f"{NAME}/2"
