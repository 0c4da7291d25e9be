"""MLflow's Dataset column holds the data each run read (issue 53, case 24): it was empty for
every run, though each run knows its corpus shards and task files by their content keys."""

from __future__ import annotations

import hashlib
from pathlib import Path

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
