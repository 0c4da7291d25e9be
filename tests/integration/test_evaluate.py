"""`cloze evaluate`: a checkpoint as it is, on the tasks, with no corpus and no pretraining.

A tiny BERT folder built offline goes through the real command (local Prefect, SQLite MLflow):
it prints the base and random-init scores beside the baselines and records a pipeline's runs
through finetune. Its two arms are the cached artifacts a continuation of the same checkpoint,
tasks and seed pairs with: evaluating first, the continuation fits neither again, and the other
way round, the evaluation fits nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tests.checkpoint_tokenizers import write_tokenizer
from tests.checkpoints import tiny_checkpoint
from tests.fakes import REPO
from tests.integration.cli_runs import local_env

# One seed, one rate and one epoch per arm: the smallest run with both arms and their intervals.
TASKS = [
    "experiment=smoke",
    "finetune=pydoc_topics",
    "finetune.seeds=1",
    "finetune.train_examples=40",
    "finetune.validation_examples=40",
    "finetune.pretrained_learning_rates=[1e-4]",
    "finetune.pretrained_epochs=1",
]
# A continuation of two steps at a rate too small to move a weight, on the same tasks and seed.
CONTINUATION = [
    *TASKS,
    "corpus.max_documents=300",
    "trainer.max_steps=2",
    "trainer.warmup_steps=1",
    "trainer.val_every_steps=2",
    "trainer.learning_rate=1e-12",
]
ARM_STAGES = ("finetune_base", "finetune_control")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("checkpoint") / "bert-tiny"
    size = write_tokenizer(folder, "wordpiece")
    return tiny_checkpoint("bert", folder, vocab_size=size, scale=0.5)


def deployment_run(root: Path, folder: Path | str) -> Any:
    """A run of the `evaluate` deployment's flow, in this process, as a worker starts it: its
    final state (a refusal is a failed state, not an exception)."""
    from flows.evaluate.flow import evaluate_deployment

    return evaluate_deployment(
        init_from=str(folder), overrides=[*TASKS, f"paths.root={root}"], return_state=True
    )


def continuation(root: Path, folder: Path) -> dict[str, Any]:
    from flows.pipeline import pretraining_pipeline
    from flows.resolve import resolve_run

    run = resolve_run([*CONTINUATION, f"paths.root={root}", f"pretrain.init_from={folder}"])
    return pretraining_pipeline(run)  # type: ignore[no-any-return]


def published(root: Path, stage: str) -> set[str]:
    directory = root / "artifacts" / stage
    return {path.name for path in directory.iterdir() if not path.name.startswith(".")}


def arms(root: Path) -> dict[str, set[str]]:
    return {stage: published(root, stage) for stage in ARM_STAGES}


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory, checkpoint: Path) -> tuple[Path, str]:
    """The documented command, run as a user runs it: its root and its output."""
    root = tmp_path_factory.mktemp("evaluated")
    command = [
        sys.executable,
        "-m",
        "flows.cloze",
        "evaluate",
        *TASKS,
        f"pretrain.init_from={checkpoint}",
        f"paths.root={root}",
    ]
    # Its own temporary Prefect server, given time to start beside the suite's work.
    env = local_env(root, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="600")
    result = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return root, result.stdout + result.stderr


def test_it_prints_base_and_random_init_scores_with_no_pretrain_stage(
    evaluated: tuple[Path, str],
) -> None:
    root, output = evaluated
    summary = output[output.index("Cloze evaluate summary") :]
    assert "tokenizer  [imported] bert-tiny, vocab " in summary
    assert "checkpoint [imported] bert-tiny: BertForMaskedLM (bert)" in summary
    assert "the checkpoint bert-tiny as it is (base) vs random init" in summary
    assert "pydoc_topics accuracy over 1 seed(s): base 0." in summary
    assert ", random init 0." in summary and "; base over random init " in summary
    assert "paired t over seeds none (one seed), bootstrap over test examples [" in summary
    assert "baselines (no encoder): majority " in summary
    for absent in ("  shards ", "  pretrain ", "adapted over base"):
        assert absent not in summary
    stages = {path.name for path in (root / "artifacts").iterdir()}
    assert stages == {"tokenizer", "checkpoint", "finetune", *ARM_STAGES}


def test_mlflow_holds_it_as_a_run_through_finetune(evaluated: tuple[Path, str]) -> None:
    root, _ = evaluated
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("cloze")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    [parent] = [run for run in runs if run.data.tags.get("cloze.run") == "evaluate"]
    children = {
        run.data.tags["cloze.stage"]: run
        for run in runs
        if run.data.tags.get("mlflow.parentRunId") == parent.info.run_id
    }
    assert set(children) == {"tokenizer", "checkpoint", "finetune"}
    [task] = [
        run
        for run in runs
        if run.data.tags.get("mlflow.parentRunId") == children["finetune"].info.run_id
    ]
    assert task.data.tags["cloze.task"] == "pydoc_topics"
    assert "lift_accuracy" in task.data.metrics and "pretrained_accuracy_mean" in task.data.metrics
    assert parent.data.params["pretrain.init_from"].endswith("bert-tiny")


def test_a_continuation_after_it_reuses_both_arms(
    evaluated: tuple[Path, str], checkpoint: Path
) -> None:
    root, _ = evaluated
    before = arms(root)
    assert all(len(keys) == 1 for keys in before.values()), before
    evaluation = evaluation_figures(root)
    summary = continuation(root, checkpoint)
    assert arms(root) == before  # no arm fitted again: the continuation found both published
    assert summary["stages"]["checkpoint"]["cache_hit"]
    finetune = summary["stages"]["finetune"]
    assert finetune["pydoc_topics.base_accuracy_mean"] == evaluation["pretrained_accuracy_mean"]
    assert (
        finetune["pydoc_topics.random_init_accuracy_mean"]
        == evaluation["random_init_accuracy_mean"]
    )


def test_an_evaluation_after_a_continuation_fits_nothing_here_as_its_deployment(
    tmp_path: Path, checkpoint: Path
) -> None:
    continued = continuation(tmp_path, checkpoint)["stages"]["finetune"]
    before = arms(tmp_path)
    state = deployment_run(tmp_path, checkpoint)
    assert state.is_completed(), state.message
    summary = state.result()
    assert arms(tmp_path) == before
    assert summary["stages"]["checkpoint"]["cache_hit"]
    finetune = summary["stages"]["finetune"]
    assert finetune["evaluated_checkpoint"] == "bert-tiny"
    assert (
        finetune["pydoc_topics.pretrained_accuracy_mean"]
        == (continued["pydoc_topics.base_accuracy_mean"])
    )
    assert (
        finetune["pydoc_topics.random_init_accuracy_mean"]
        == (continued["pydoc_topics.random_init_accuracy_mean"])
    )
    assert "pretrain" not in summary["stages"] and "shards" not in summary["stages"]


def evaluation_figures(root: Path) -> dict[str, Any]:
    """The `pydoc_topics.*` outputs of the one finetune artifact under `root`, unprefixed."""
    [key] = published(root, "finetune")
    manifest = json.loads((root / "artifacts" / "finetune" / key / "manifest.json").read_text())
    return {
        name.removeprefix("pydoc_topics."): value
        for name, value in manifest["outputs"].items()
        if name.startswith("pydoc_topics.")
    }


def test_its_deployment_refuses_a_run_without_a_checkpoint_in_one_line(tmp_path: Path) -> None:
    state = deployment_run(tmp_path, "")
    assert state.is_failed()
    assert state.message.startswith("pretrain.init_from is not set: cloze evaluate scores")
    assert not (tmp_path / "artifacts" / "tokenizer").exists()  # refused before any stage
