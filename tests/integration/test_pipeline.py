"""The whole pipeline on a tiny config, through real local Prefect and a SQLite MLflow store."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from flows.resolve import resolve_run
from flows.tracking.links import run_role
from flows.tracking.runs import STEP_OFFSET_TAG
from flows.training.precision_choice import resolve_precision
from lightning_modules.models.serialization import load_masked_lm
from tests.fakes import logits_match
from tests.guides import guide_quotes

TINY = [
    "experiment=smoke",
    "corpus.max_documents=800",
    "trainer.max_steps=40",
    "trainer.val_every_steps=20",
    "finetune.train_examples=200",
]
STAGES = ("tokenizer", "shards", "pretrain", "finetune")


def run_pipeline(root: Path, *overrides: str) -> Any:
    from flows.pipeline import pretraining_pipeline

    run = resolve_run([*TINY, f"paths.root={root}", *overrides])
    return pretraining_pipeline(run, return_state=True)


def child_runs(root: Path, parent_run_id: str) -> dict[str, Any]:
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("cloze")
    runs = client.search_runs(
        [experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent_run_id}'"
    )
    return {run_role(run.data.tags, run.info.run_name): run for run in runs}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pipeline")


@pytest.fixture(scope="module")
def first(root: Path) -> Any:
    return run_pipeline(root)


def test_flow_run_completes_and_is_recorded_in_prefect(first: Any) -> None:
    from prefect.client.orchestration import get_client

    assert first.is_completed()
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(first.state_details.flow_run_id)
        flow = client.read_flow(flow_run.flow_id)
    assert flow.name == "cloze-pipeline"
    assert flow_run.state.name == "Completed"


def test_each_stage_is_a_child_run_with_its_metrics(root: Path, first: Any) -> None:
    summary = first.result()
    children = child_runs(root, summary["mlflow_run_id"])
    assert sorted(children) == sorted(STAGES)
    assert children["tokenizer"].data.metrics["vocab_size"] == 2000
    assert children["shards"].data.metrics["train_sequences"] > 100
    assert 0 < children["finetune"].data.metrics["pydoc_topics.pretrained_accuracy_mean"] <= 1
    assert "pydoc_topics.lift_accuracy" in children["finetune"].data.metrics
    assert all(run.data.tags["cloze.cache_hit"] == "false" for run in children.values())
    assert all(run.info.status == "FINISHED" for run in children.values())


def test_the_run_records_the_precision_it_resolved_on_this_machine_and_why(
    root: Path, first: Any
) -> None:
    """`trainer.precision: auto` (the default, which experiment=smoke inherits) is kept as
    configured; beside it, what it resolved to here and the reason (issue 41)."""
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    params = client.get_run(first.result()["mlflow_run_id"]).data.params
    resolved = resolve_precision("auto", "cpu")
    assert params["trainer.precision"] == "auto"
    assert params["trainer.precision_resolved"] == resolved.precision
    assert params["trainer.precision_reason"] == resolved.reason


def test_each_task_is_a_child_of_the_finetune_run_with_table_and_chart(
    root: Path, first: Any
) -> None:
    from prefect.client.orchestration import get_client

    summary = first.result()
    finetune_run = child_runs(root, summary["mlflow_run_id"])["finetune"]
    tasks = child_runs(root, finetune_run.info.run_id)
    assert sorted(tasks) == ["pydoc_topics"]
    metrics = tasks["pydoc_topics"].data.metrics
    assert metrics["lift_accuracy"] == pytest.approx(
        metrics["pretrained_accuracy_mean"] - metrics["random_init_accuracy_mean"]
    )
    assert tasks["pydoc_topics"].info.status == "FINISHED"
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    logged = {item.path for item in client.list_artifacts(finetune_run.info.run_id)}
    assert {"summary.md", "lift.png"} <= logged
    with get_client(sync_client=True) as prefect:
        artifact = prefect.read_latest_artifacts()
    # One artifact per run, headline first (issue 53, case 21); no second `finetune-summary`.
    assert not [a for a in artifact if a.key == "finetune-summary"]
    [markdown] = [str(a.data) for a in artifact if a.key == "cloze-finetune-summary"]
    assert markdown.index("- pydoc_topics accuracy over ") < markdown.index("## Stages")


def test_mlm_loss_falls_and_the_curve_reaches_mlflow(root: Path, first: Any) -> None:
    summary = first.result()
    pretrain = summary["stages"]["pretrain"]
    assert pretrain["val_loss"] < pretrain["initial_val_loss"] - 0.5
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    run_id = child_runs(root, summary["mlflow_run_id"])["pretrain"].info.run_id
    history = client.get_metric_history(run_id, "val/loss")
    assert len(history) >= 3
    assert history[-1].value < history[0].value
    assert client.get_metric_history(run_id, "train/loss")
    # MLflow's Dataset column: the shards the stage read, by their key (issue 53, case 24).
    shards = summary["stages"]["shards"]["key"]
    for run in (run_id, summary["mlflow_run_id"]):
        inputs = client.get_run(run).inputs
        assert inputs is not None
        logged = [(i.dataset.name, i.dataset.digest) for i in inputs.dataset_inputs]
        assert logged == [("shards", shards)]


def test_the_encoder_is_exported_for_transformers_and_registered(root: Path, first: Any) -> None:
    from transformers import AutoModelForMaskedLM

    summary = first.result()
    pretrain_dir = Path(summary["stages"]["pretrain"]["path"])
    ours = load_masked_lm(pretrain_dir).eval()
    theirs = AutoModelForMaskedLM.from_pretrained(pretrain_dir / "huggingface").eval()
    assert logits_match(
        lambda ids, mask: ours.head(ours.encoder(ids, mask)), theirs, ours.config.vocab_size
    )

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    run = child_runs(root, summary["mlflow_run_id"])["pretrain"]
    artifacts = {item.path for item in client.list_artifacts(run.info.run_id, "huggingface")}
    assert "huggingface/model.safetensors" in artifacts
    versions = client.search_model_versions("name='cloze-encoder'")
    assert run.info.run_id in {version.run_id for version in versions}
    assert run.data.tags["cloze.registered_model"].startswith("cloze-encoder/")


def test_rerun_with_the_same_config_reuses_every_stage(root: Path, first: Any) -> None:
    again = run_pipeline(root)
    summary = again.result()
    assert all(summary["stages"][stage]["cache_hit"] for stage in STAGES)
    assert summary["stages"]["pretrain"]["key"] == first.result()["stages"]["pretrain"]["key"]
    children = child_runs(root, summary["mlflow_run_id"])
    assert all(run.data.tags["cloze.cache_hit"] == "true" for run in children.values())


def test_a_run_continuing_the_pretrain_artifact_keys_it_by_content_and_counts_its_steps(
    root: Path, first: Any
) -> None:
    """`pretrain.init_from` naming a pretrain artifact, as the lift experiments and the domain
    refresh continue: the starting point, resolved once, enters the key by its content address,
    the registry says where the model started, and `compare` counts the steps before it."""
    from flows.pipeline import pretraining_pipeline

    start = Path(first.result()["stages"]["pretrain"]["path"]).resolve()
    continuation = [f"pretrain.init_from={start}", f"tokenizer.from_artifact={start}"]
    steps = ["trainer.max_steps=4", "trainer.warmup_steps=1", "trainer.val_every_steps=4"]
    resolved = resolve_run([*TINY, f"paths.root={root}", *continuation, *steps], "pretrain")
    init = resolved.init
    assert (init.kind, init.weights, init.identity) == ("artifact", start, f"pretrain:{start.name}")
    summary = pretraining_pipeline(resolved)
    continued = Path(summary["stages"]["pretrain"]["path"])
    manifest = json.loads((continued / "manifest.json").read_text())
    assert manifest["inputs"]["init_from"] == f"pretrain:{start.name}"
    run = child_runs(root, summary["mlflow_run_id"])["pretrain"]
    assert run.data.tags[STEP_OFFSET_TAG] == str(first.result()["stages"]["pretrain"]["steps"])
    name, version = run.data.tags["cloze.registered_model"].split("/")
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    assert f"continued from {start}." in client.get_model_version(name, version).description


def test_changing_only_the_mask_rate_reuses_tokenizer_and_shards(root: Path, first: Any) -> None:
    summary = run_pipeline(root, "objective.mask_rate=0.3").result()
    hits = {stage: summary["stages"][stage]["cache_hit"] for stage in STAGES}
    assert hits == {"tokenizer": True, "shards": True, "pretrain": False, "finetune": False}


def test_label_counts_add_a_label_curve_with_its_chart_and_a_line_per_count(
    root: Path, first: Any
) -> None:
    """200 labels is the run's own `train_examples`: that point is its finetune artifact."""
    from flows.summary import render_summary

    summary = run_pipeline(root, "finetune.label_counts=[50,200]").result()
    assert all(summary["stages"][stage]["cache_hit"] for stage in STAGES)
    curve = summary["stages"]["label_curve"]
    assert (Path(curve["path"]) / "label_curve.png").is_file()
    text = render_summary(summary)
    for count in (50, 200):
        assert f"    pydoc_topics accuracy at {count} labels: pretrained " in text
    assert "    The lift's 95% interval (test bootstrap) " in text  # one seed: no t-interval
    run = child_runs(root, summary["mlflow_run_id"])["label_curve"]
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    logged = {item.path for item in client.list_artifacts(run.info.run_id)}
    assert {"label_curve.png", "label_curve.md", "label_curve.json"} <= logged
    history = client.get_metric_history(run.info.run_id, "pydoc_topics/lift")
    assert sorted(point.step for point in history) == [50, 200]


def test_cli_runs_the_flow_and_prints_the_summary(root: Path, first: Any) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flows", *TINY, f"paths.root={root}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert output.count("[reused (cache hit)]") == 4  # the summary
    # The log says when each stage starts and how it ended, with its key and figures.
    keys = {stage: first.result()["stages"][stage]["key"] for stage in STAGES}
    for stage in STAGES:
        assert f"flows.pipeline: {stage}: started" in output
        assert f"flows.pipeline: {stage}: reused (cache hit), key {keys[stage]}" in output
    assert f"key {keys['tokenizer']}: vocab 2000, fertility " in output
    assert f"key {keys['shards']}: train " in output
    assert "\n\n" not in result.stderr  # the log has no blank lines
    # Before any stage: the smoke bundle's recipe is not the demo task's own.
    note = "task pydoc_topics runs on this config's recipe, not its own: seeds 1 (own 5)"
    assert output.index(note) < output.index("tokenizer: started")
    assert "pydoc_topics accuracy over 1 seed(s): pretrained" in output
    assert f"sqlite:///{root / 'mlflow.db'}" in output
    # What docs/guides/deployments.md quotes of a run's output, as a local run prints it.
    assert guide_quotes("deployments.md", "(`tokenizer: started`)")
    quoted = "`tokenizer: reused (cache hit), key 1e7d...: vocab 8000, fertility 1.670 tokens/word"
    assert guide_quotes("deployments.md", quoted)
    assert re.search(
        r"tokenizer: reused \(cache hit\), key \w+: vocab \d+, fertility [\d.]+ tokens/word", output
    )
    assert guide_quotes("deployments.md", "the summary's `run page:` line (every CLI run)")
    assert re.search(
        r"run page: http://127\.0\.0\.1:5000/#/experiments/\d+/runs/\w+\?workflowType=machine_learning",
        output,
    )
    assert guide_quotes("deployments.md", "(a default `make demo`) prints no `View` line")
    assert "View run" not in output and "View experiment" not in output


def test_cli_rejects_an_unknown_key_by_name() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flows", "trainer.max_stepz=3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown config key trainer.max_stepz; nearest")
    assert "+trainer" not in result.stderr and result.stderr.count("\n") == 1


def test_cli_names_a_missing_corpus_path(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "flows",
            "corpus=files",
            f"corpus.paths=[{tmp_path}/none.txt]",
            f"paths.root={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert f"corpus.paths: {tmp_path}/none.txt does not exist" in result.stderr


def test_cli_names_replay_paths_that_match_nothing_before_any_stage(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "flows",
            f"corpus.replay={{paths:['{tmp_path}/wiki_*'],share:0.1}}",
            f"paths.root={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    error = f"error: corpus.replay.paths: the glob '{tmp_path}/wiki_*' matches no file\n"
    assert error in result.stderr and result.stderr.count("error:") == 1
    assert not (tmp_path / "artifacts" / "tokenizer").exists()
