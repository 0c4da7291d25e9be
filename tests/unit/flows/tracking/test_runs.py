from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

from flows.core.artifacts import ArtifactRef
from flows.core.redaction import REDACTED, redact_secrets
from flows.orchestration.publish import TaskRuns, publish
from flows.tracking.runs import Tracker, flatten
from tests.fakes import finetune_outputs, grid_arm


def test_secret_looking_values_are_masked_and_the_rest_kept() -> None:
    config = {
        "tracking": {"uri": "http://127.0.0.1:5000", "api_token": "abc", "password": "p"},
        "storage": {"aws_secret": "s", "access_key": "k", "key": "k2"},
        "tokenizer": {"vocab_size": 8000, "special_tokens": {"mask": "[MASK]"}},
        "trainer": {"max_tokens": 1000},
    }
    safe = dict(flatten(redact_secrets(config)))
    assert {name for name, value in safe.items() if value == REDACTED} == {
        "tracking.api_token",
        "tracking.password",
        "storage.aws_secret",
        "storage.access_key",
        "storage.key",
    }
    assert safe["tokenizer.special_tokens.mask"] == "[MASK]"
    assert safe["trainer.max_tokens"] == 1000
    assert config["tracking"]["api_token"] == "abc"  # the original is untouched


def open_tracker(uri: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        Tracker(uri, "cloze", None)
        results.put("ok")
    except Exception as error:
        results.put(f"{type(error).__name__}: {error}")


def test_two_processes_opening_a_fresh_sqlite_store_at_once_both_succeed(tmp_path: Path) -> None:
    # Without the set-up lock, MLflow's schema migration raced here in 3 trials out of 3.
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    workers = [context.Process(target=open_tracker, args=(uri, barrier, results)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [results.get(timeout=1) for _ in workers] == ["ok", "ok"]


def test_each_task_run_carries_its_per_class_scores_as_an_mlflow_table(tmp_path: Path) -> None:
    scores = {"precision": 0.5, "recall": None, "f1": 0.0, "support": 0}
    record = {
        arm: {"per_class": {"neg": {**scores, "support": 3}, "pos": scores}}
        for arm in ("pretrained", "random_init")
    }
    (tmp_path / "results.json").write_text(json.dumps({"t": record}))
    (tmp_path / "summary.md").write_text("| task |\n")
    (tmp_path / "lift.png").write_bytes(b"\x89PNG")
    arms = {name: grid_arm(1e-3, [1e-3], [3, 4]) for name in ("pretrained", "random_init")}
    ref = ArtifactRef("finetune", "k", tmp_path, finetune_outputs(arms), False)
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "cloze", None)
    stage_run = tracker.start_run("finetune")
    task_runs = TaskRuns(tracker, stage_run)
    publish(ref, stage_run, task_runs)
    local = tracker.client.download_artifacts(task_runs.runs["t"].run_id, "per_class.json")
    table = json.loads(Path(local).read_text())
    assert table["columns"] == ["arm", "class", "precision", "recall", "f1", "support"]
    assert table["data"][:2] == [
        ["pretrained", "neg", 0.5, None, 0.0, 3],
        ["pretrained", "pos", 0.5, None, 0.0, 0],
    ]
    assert [row[0] for row in table["data"]] == ["pretrained"] * 2 + ["random_init"] * 2
