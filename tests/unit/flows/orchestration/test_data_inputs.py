"""MLflow's Dataset column holds the data each run read (issue 53, case 24): it was empty for
every run, though each run knows its corpus shards and task files by their content keys."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import BAD_REQUEST
from mlflow.tracking import MlflowClient

from flows.core.artifacts import ArtifactRef
from flows.downstream.settings import FinetuneSettings
from flows.orchestration.data_inputs import shards_input, task_inputs
from flows.tracking.runs import Tracker

GLUE = {"format": "glue", "labels": ["0", "1"], "train": "t.tsv", "test": "held.tsv"}


def test_runs_carry_their_shards_and_task_files_and_filter_by_them(tmp_path: Path) -> None:
    (tmp_path / "t.tsv").write_text("sentence\tlabel\na good one\t1\na bad one\t0\n")
    (tmp_path / "held.tsv").write_text("sentence\tlabel\nfine\t1\n")
    shards = ArtifactRef("shards", "0123456789abcdef0123", tmp_path / "shards", {}, False)
    finetune = FinetuneSettings(tasks=["t"], catalog={"t": GLUE}, data_dir=str(tmp_path))
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "data", tmp_path / "artifacts")
    pretrain, task = tracker.start_run("pretrain"), tracker.start_run("finetune/t")
    pretrain.log_inputs([shards_input(shards)])
    task.log_inputs(task_inputs(finetune)["t"])
    client = MlflowClient(tracker.tracking_uri)

    def logged(run_id: str) -> list[tuple[str, str, str, str]]:
        inputs = client.get_run(run_id).inputs
        assert inputs is not None
        return [
            (item.dataset.name, item.dataset.digest, item.dataset.source, item.tags[0].value)
            for item in inputs.dataset_inputs
        ]

    assert logged(pretrain.run_id) == [
        ("shards", shards.key, f'{{"uri": "{tmp_path / "shards"}"}}', "training")
    ]
    train_key = hashlib.sha256((tmp_path / "t.tsv").read_bytes()).hexdigest()[:20]
    assert sorted(logged(task.run_id)) == sorted(
        [
            ("t/train", train_key, f'{{"uri": "{tmp_path / "t.tsv"}"}}', "train"),
            (
                "t/test",
                hashlib.sha256((tmp_path / "held.tsv").read_bytes()).hexdigest()[:20],
                f'{{"uri": "{tmp_path / "held.tsv"}"}}',
                "test",
            ),
        ]
    )
    # A person filters the runs table by data: the runs that trained on these shards.
    experiment = client.get_experiment_by_name("data")
    assert experiment is not None
    found = client.search_runs([experiment.experiment_id], f"dataset.digest = '{shards.key}'")
    assert [run.info.run_id for run in found] == [pretrain.run_id]


def test_a_dataset_another_run_inserted_first_is_linked_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pipelines on one store log the same shards at once; MLflow's server checks for the
    dataset, then inserts it unlocked, and the slower insert fails on the unique key (seen
    with PostgreSQL: tests/integration/test_team_setup.py). The fault is injected: the rival's
    row goes in first, then the call fails as the server's did."""
    shards = ArtifactRef("shards", "0123456789abcdef0123", tmp_path / "shards", {}, False)
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "data", tmp_path / "artifacts")
    rival, ours = tracker.start_run("pretrain"), tracker.start_run("pretrain")
    log_inputs = ours.client.log_inputs
    raced: list[bool] = []

    def lost_the_race(run_id: str, datasets: Any) -> None:
        if not raced:
            raced.append(True)
            rival.log_inputs([shards_input(shards)])
            raise MlflowException(
                'duplicate key value violates unique constraint "dataset_pk"',
                error_code=BAD_REQUEST,
            )
        log_inputs(run_id, datasets)

    monkeypatch.setattr(ours.client, "log_inputs", lost_the_race)
    ours.log_inputs([shards_input(shards)])
    client = MlflowClient(tracker.tracking_uri)
    experiment = client.get_experiment_by_name("data")
    assert experiment is not None
    found = client.search_runs([experiment.experiment_id], f"dataset.digest = '{shards.key}'")
    assert sorted(run.info.run_id for run in found) == sorted([rival.run_id, ours.run_id])
