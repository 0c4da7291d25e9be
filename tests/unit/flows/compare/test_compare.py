"""`python -m flows.compare` against real runs in a temporary SQLite MLflow store.

The runs are written the way the pipeline writes them (flows.tracking.runs.Tracker): a `pipeline`
parent with the flattened config as params and `<stage>.<figure>` metrics, and a `pretrain` child
whose Lightning logger recorded `train/loss` and `val/loss` per step.
"""

from __future__ import annotations

import json
import struct
import time
import urllib.parse
from pathlib import Path
from typing import Any, cast

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from flows.compare.cli import (
    CompareSettings,
    RunSelectionError,
    compare,
    loss_curves,
    main,
)
from flows.compare.plots import lift_panels
from flows.core.settings import ConfigError
from flows.tracking.links import RunIdentity
from flows.tracking.runs import STEP_OFFSET_TAG, Tracker
from tests.guides import guide_quotes

BASE_CONFIG: dict[str, Any] = {
    "model": {"name": "bert-tiny", "hidden_size": 32},
    "trainer": {"max_steps": 20, "lr": 0.001},
    "tokenizer": {"vocab_size": 8000},
}


def record_run(
    tracker: Tracker,
    config: dict[str, Any],
    metrics: dict[str, float],
    losses: dict[str, list[tuple[int, float]]],
    key: str,
    cache_hit: bool = False,
) -> str:
    """A parent run and its pretrain child as flows.pipeline records them, named after the flow
    run (`<model>-pydoc-<second>/pipeline`); returns the parent id."""
    second = len(tracker.client.search_runs([tracker.experiment_id]))
    tracker.identity = RunIdentity(f"{config['model']['name']}-pydoc-20261201-0800{second:02d}")
    parent = tracker.start_run("pipeline", tags={"cloze.model": config["model"]["name"]})
    parent.log_params(config)
    child = tracker.start_run("pretrain", parent, tags={"cloze.stage": "pretrain"})
    child.set_tags({"cloze.cache_hit": str(cache_hit).lower(), "cloze.artifact_key": key})
    history = [
        Metric(key, value, int(time.time() * 1000), step)
        for key, points in losses.items()
        for step, value in points
    ]
    if history:
        tracker.client.log_batch(child.run_id, metrics=history)
    child.finish()
    parent.log_metrics(metrics)
    parent.finish()
    return parent.run_id


class StartedInOrder:
    """The tracker's own client, whose runs start a second apart in the order they are created:
    compare orders runs by start time, and the clock alone could give two runs the same
    millisecond."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.start_time = 1_796_112_000_000  # 2026-12-01 08:00 UTC, in ms

    def create_run(self, experiment_id: str, **options: Any) -> Any:
        self.start_time += 1000
        return self.client.create_run(experiment_id, start_time=self.start_time, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def curve_point(task: str, fraction: float, tokens: int, lift: float) -> dict[str, float]:
    """A lift-vs-compute point as the pipeline logs it on the parent run (`lift_curve.*`)."""
    fields = {
        "tokens": tokens,
        "lift": lift,
        "ci_low": lift - 0.05,
        "ci_high": lift + 0.05,
        "bootstrap_low": lift - 0.03,
        "bootstrap_high": lift + 0.03,
        "pretrained_mean": 0.5 + lift,
    }
    label = f"f{fraction:g}".replace(".", "_")
    return {f"lift_curve.{task}.{label}.{name}": value for name, value in fields.items()}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("compare")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    tracker = Tracker(uri, "cmp", root / "mlartifacts")
    tracker.client = cast(MlflowClient, StartedInOrder(tracker.client))
    Tracker(uri, "other", None)
    curve = {"train/loss": [(9, 7.0), (19, 6.0)], "val/loss": [(0, 7.7), (19, 5.9)]}
    ids = {
        "old": record_run(tracker, BASE_CONFIG, {"pretrain.val_loss": 9.0}, {}, "k-old"),
        "a": record_run(
            tracker,
            BASE_CONFIG,
            {
                "pretrain.val_loss": 5.94,
                "pretrain.steps": 20,
                "shards.train_tokens": 100,
                "finetune.pretrained_accuracy": 0.6,
                "finetune.random_init_accuracy": 0.4,
                "finetune.lift_accuracy": 0.2,
                "finetune.seeds": 5,
                **curve_point("topics", 0.5, 1000, 0.05),
                **curve_point("topics", 1.0, 2000, 0.2),
            },
            curve,
            "k-a",
        ),
        "b": record_run(
            tracker,
            {
                **BASE_CONFIG,
                "model": {"name": "bert-mini", "hidden_size": 32},
                "trainer": {"max_steps": 30, "lr": 0.001, "warmup": 3},
            },
            {
                "pretrain.val_loss": 5.5,
                "finetune.pretrained_accuracy": 0.7,
                "finetune.seeds": 5,
                **curve_point("topics", 0.25, 500, -0.01),
                **curve_point("topics", 1.0, 2000, 0.1),
            },
            {"train/loss": [(9, 6.8), (19, 5.8), (29, 5.1)], "val/loss": [(0, 7.6), (29, 5.5)]},
            "k-b",
        ),
        # Same config as `a`: the pretrain stage was a cache hit and logged no curve itself.
        "c": record_run(
            tracker, BASE_CONFIG, {"pretrain.val_loss": 5.94}, {}, "k-a", cache_hit=True
        ),
    }
    experiment = tracker.client.get_experiment_by_name("cmp")
    assert experiment is not None
    return {"uri": uri, "ids": ids, "root": root, "experiment_id": experiment.experiment_id}


def settings(store: dict[str, Any], tmp_path: Path, **overrides: Any) -> CompareSettings:
    return CompareSettings(
        tracking_uri=store["uri"], experiment="cmp", output_dir=tmp_path / "out", **overrides
    )


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_table_lists_only_the_params_that_differ_with_each_runs_value(
    store: dict[str, Any], tmp_path: Path
) -> None:
    ids = store["ids"]
    result = compare(settings(store, tmp_path, run_ids=(ids["a"], ids["b"])))
    assert [run.info.run_id for run in result.runs] == [ids["a"], ids["b"]]
    assert result.params == [
        ("model.name", ["bert-tiny", "bert-mini"]),
        ("trainer.max_steps", ["20", "30"]),
        ("trainer.warmup", [None, "3"]),
    ]
    assert "| trainer.max_steps | 20 | 30 |" in result.text
    assert "| trainer.warmup | - | 3 |" in result.text
    assert "tokenizer.vocab_size" not in result.text  # the same in both runs
    everything = compare(settings(store, tmp_path, run_ids=(ids["a"], ids["b"]), show_all=True))
    assert ("tokenizer.vocab_size", ["8000", "8000"]) in everything.params


def test_columns_and_charts_are_labelled_by_run_name(store: dict[str, Any], tmp_path: Path) -> None:
    ids = store["ids"]
    result = compare(settings(store, tmp_path, run_ids=(ids["a"], ids["b"])))
    names = ["bert-tiny-pydoc-20261201-080002", "bert-mini-pydoc-20261201-080004"]
    assert result.labels == names  # the table's columns and the charts' legends
    assert result.text.splitlines()[1] == f"|  | {names[0]} | {names[1]} |"


def test_final_metrics_follow_the_globs_and_show_a_gap_where_a_run_lacks_one(
    store: dict[str, Any], tmp_path: Path
) -> None:
    ids = store["ids"]
    result = compare(settings(store, tmp_path, run_ids=(ids["a"], ids["b"])))
    assert dict(result.metrics) == {
        "finetune.lift_accuracy": [0.2, None],
        "finetune.pretrained_accuracy": [0.6, 0.7],
        "finetune.random_init_accuracy": [0.4, None],
        "pretrain.steps": [20.0, None],
        "pretrain.val_loss": [5.94, 5.5],
    }  # not finetune.seeds: 5 in both
    assert "Final metrics that differ (5)" in result.text
    assert "(--all shows every param and metric)" in result.text
    everything = compare(settings(store, tmp_path, run_ids=(ids["a"], ids["b"]), show_all=True))
    assert ("finetune.seeds", [5.0, 5.0]) in everything.metrics
    assert "Final metrics (6)" in everything.text
    assert "| pretrain.val_loss | 5.94 | 5.5 |" in result.text
    assert "| pretrain.steps | 20 | - |" in result.text
    assert "shards.train_tokens" not in result.text
    only_shards = compare(settings(store, tmp_path, run_ids=(ids["a"],), metrics=("shards.*",)))
    assert only_shards.metrics == [("shards.train_tokens", [100.0])]


def test_charts_are_pngs_with_one_loss_line_per_run_including_a_cache_hit(
    store: dict[str, Any], tmp_path: Path
) -> None:
    ids = store["ids"]
    result = compare(settings(store, tmp_path, run_ids=(ids["a"], ids["b"], ids["c"])))
    assert result.loss_chart == tmp_path / "out" / "loss_curves.png"
    width, height = png_size(result.loss_chart)
    assert width > 500 and height > 200
    # `c` reused `a`'s pretraining: its curve is the one the producing run logged.
    assert result.loss_lines == {"train/loss": 3, "val/loss": 3}
    assert result.lift_chart is not None
    png_size(result.lift_chart)
    assert result.lift_bars == 3  # a: both arms; b: pretrained only; c: none


def test_lift_vs_compute_curves_of_several_runs_are_overlaid(
    store: dict[str, Any], tmp_path: Path
) -> None:
    ids = store["ids"]
    result = compare(settings(store, tmp_path, run_ids=(ids["a"], ids["b"], ids["old"])))
    assert result.curve_chart == tmp_path / "out" / "lift_curve.png"
    png_size(result.curve_chart)
    assert result.curve_lines == 2  # a and b logged a curve; old did not
    assert f"lift-vs-compute curves: {result.curve_chart}" in result.text


def test_last_n_takes_the_newest_parent_runs_oldest_first(
    store: dict[str, Any], tmp_path: Path
) -> None:
    ids = store["ids"]
    result = compare(settings(store, tmp_path, last=3))
    assert [run.info.run_id for run in result.runs] == [ids["a"], ids["b"], ids["c"]]
    filtered = compare(settings(store, tmp_path, filter="params.`model.name` = 'bert-tiny'"))
    assert [run.info.run_id for run in filtered.runs] == [ids["old"], ids["a"], ids["c"]]


def test_the_link_opens_the_mlflow_compare_view_on_these_runs(
    store: dict[str, Any], tmp_path: Path
) -> None:
    ids = store["ids"]
    result = compare(
        settings(store, tmp_path, run_ids=(ids["a"], ids["b"]), ui_url="http://127.0.0.1:5000/")
    )
    encoded = (
        f"runs=[%22{ids['a']}%22,%22{ids['b']}%22]&experiments=[%22{store['experiment_id']}%22]"
    )
    assert result.link == (
        f"http://127.0.0.1:5000/#/compare-runs?{encoded}&workflowType=machine_learning"
    )
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(result.link).fragment.split("?", 1)[1])
    assert json.loads(query["runs"][0]) == [ids["a"], ids["b"]]
    assert f"MLflow UI: {result.link}" in result.text


def test_a_single_run_still_reports_metrics_charts_and_its_run_page(
    store: dict[str, Any], tmp_path: Path
) -> None:
    ids = store["ids"]
    result = compare(settings(store, tmp_path, run_ids=(ids["a"],)))
    assert result.params == []
    assert "(a single run: nothing to compare)" in result.text
    assert result.loss_lines == {"train/loss": 1, "val/loss": 1}
    assert result.link == (
        f"http://127.0.0.1:5000/#/experiments/{store['experiment_id']}/runs/{ids['a']}"
        "?workflowType=machine_learning"
    )


def test_a_run_without_curves_or_lift_metrics_writes_no_chart(
    store: dict[str, Any], tmp_path: Path
) -> None:
    result = compare(settings(store, tmp_path, run_ids=(store["ids"]["old"],)))
    assert result.loss_chart is None and result.lift_chart is None
    assert "loss curves: (no data to plot)" in result.text
    assert dict(result.metrics) == {"pretrain.val_loss": [9.0]}


def test_lift_pairs_are_scores_found_by_pattern_with_std_as_error_bars() -> None:
    runs = [
        {
            "finetune.topics.pretrained_macro_f1_mean": 0.5,
            "finetune.topics.pretrained_macro_f1_std": 0.05,
            "finetune.topics.random_init_macro_f1_mean": 0.3,
            "finetune.topics.lift_macro_f1": 0.2,
            "finetune.pretrained_accuracy": 0.6,  # no random_init partner in any run
            "finetune.lift_accuracy": 0.1,
            # Both arms but no lift: a side figure of the runs, not a score.
            "finetune.topics.pretrained_epochs_mean": 3.0,
            "finetune.topics.random_init_epochs_mean": 3.0,
        },
        {"finetune.topics.random_init_macro_f1_mean": 0.35},
    ]
    (panel,) = lift_panels(runs)
    assert panel.title == "finetune.topics macro_f1"
    assert panel.values == {"pretrained": [0.5, None], "random_init": [0.3, 0.35]}
    assert panel.errors == {"pretrained": [0.05, None], "random_init": [None, None]}


def test_unknown_experiment_is_named_with_the_ones_that_exist(
    store: dict[str, Any], tmp_path: Path
) -> None:
    with pytest.raises(RunSelectionError, match=r"'nope' not found.*Default, cmp, other"):
        compare(CompareSettings(store["uri"], "nope", tmp_path))


def test_bad_inputs_fail_with_a_message_and_create_nothing(
    store: dict[str, Any], tmp_path: Path
) -> None:
    missing = tmp_path / "absent.db"
    with pytest.raises(RunSelectionError, match="no MLflow store at"):
        compare(CompareSettings(f"sqlite:///{missing}", "cmp", tmp_path))
    assert not missing.exists()
    with pytest.raises(RunSelectionError, match="run 'deadbeef' not found"):
        compare(settings(store, tmp_path, run_ids=("deadbeef",)))
    with pytest.raises(RunSelectionError, match="no top-level runs named 'pipeline'"):
        compare(settings(store, tmp_path, filter="params.`model.name` = 'albert'"))
    with pytest.raises(ConfigError, match="--last=0"):
        settings(store, tmp_path, last=0)


def test_cli_prints_a_plain_table_and_exits_2_on_an_unknown_experiment(
    store: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--tracking-uri", store["uri"], "--out", str(tmp_path)]
    assert main([*common, "--experiment", "cmp", "--last", "2", "--format", "plain"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if line.startswith("model.name"))
    assert row.split() == ["model.name", "bert-mini", "bert-tiny"]
    assert (tmp_path / "loss_curves.png").is_file()
    assert main([*common, "--experiment", "nope"]) == 2
    assert "experiment 'nope' not found" in capsys.readouterr().err
    assert main([*common, "--experiment", "cmp", "--run-name", "domain-refresh"]) == 2
    assert "no top-level runs named 'domain-refresh'" in capsys.readouterr().err


def test_panels_whose_bars_are_all_zero_are_left_out() -> None:
    runs = [
        {
            "finetune.ner.pretrained_f1_mean": 0.0,
            "finetune.ner.random_init_f1_mean": 0.0,
            "finetune.ner.lift_f1": 0.0,
            "finetune.ner.pretrained_accuracy_mean": 0.8,
            "finetune.ner.random_init_accuracy_mean": 0.7,
            "finetune.ner.lift_accuracy": 0.1,
        }
    ]
    assert [panel.title for panel in lift_panels(runs)] == ["finetune.ner accuracy"]


def test_refresh_runs_show_their_decision_scores_and_new_files_by_default(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "refresh", None)
    # Named as the refresh flow names them: `<flow run name>/domain-refresh`.
    tracker.identity = RunIdentity("smoke-law-20261201-080447")
    first = tracker.start_run("domain-refresh")
    first.set_tags({"cloze.refresh.decision": "promoted"})
    first.log_metrics({"refresh.challenger_score": 0.61, "refresh.new_files": 2})
    first.finish()
    pretrain = tracker.start_run("pretrain", first, tags={"cloze.stage": "pretrain"})
    pretrain.set_tags({"cloze.cache_hit": "false", STEP_OFFSET_TAG: "60"})
    tracker.client.log_batch(
        pretrain.run_id, metrics=[Metric("train/loss", 5.0, int(time.time() * 1000), 9)]
    )
    pretrain.finish()
    result = compare(CompareSettings(uri, "refresh", tmp_path / "out", run_name="domain-refresh"))
    assert [run.info.run_id for run in result.runs] == [first.run_id]
    assert dict(result.tags) == {"decision": ["promoted"]}
    assert dict(result.metrics) == {
        "refresh.challenger_score": [0.61],
        "refresh.new_files": [2.0],
    }
    assert "| decision" in result.text
    # A continued run is drawn after the 60 steps its starting model had.
    assert loss_curves(MlflowClient(uri), result.runs[0])["train/loss"] == [(69, 5.0)]


def test_compare_reads_finished_runs_and_names_each_run_it_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run stopped midway holds partial figures: `--last 2` compares the two newest runs that
    finished, and says which newer run it passed over and why; `--include-unfinished` adds it."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "cmp", tmp_path / "mlartifacts")
    tracker.client = cast(MlflowClient, StartedInOrder(tracker.client))
    finished = [
        record_run(tracker, BASE_CONFIG, {"pretrain.val_loss": loss}, {}, f"k{loss}")
        for loss in (6.0, 5.0)
    ]
    tracker.identity = RunIdentity("bert-tiny-pydoc-20261201-090000")
    killed = tracker.start_run("pipeline")
    tracker.start_run("pretrain", killed).finish("KILLED")
    killed.finish("KILLED")  # as a Ctrl-C or SIGTERM ends a run (flows/tracking/runs.py)
    common = ["--tracking-uri", uri, "--experiment", "cmp", "--out", str(tmp_path / "out")]
    assert main([*common, "--last", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == [
        guide_quotes(
            "compare.md",
            "Skipped 1 run that did not finish (--include-unfinished compares them too):",
        ),
        f"- bert-tiny-pydoc-20261201-090000 (run {killed.run_id[:8]}): KILLED, stopped before it "
        "finished (a signal or Ctrl-C)",
    ]
    assert guide_quotes("compare.md", ": KILLED, stopped before it finished (a signal or Ctrl-C)")
    result = compare(CompareSettings(uri, "cmp", tmp_path / "out", last=2))
    assert [run.info.run_id for run in result.runs] == finished
    everything = compare(
        CompareSettings(uri, "cmp", tmp_path / "out", last=2, include_unfinished=True)
    )
    assert [run.info.run_id for run in everything.runs] == [finished[1], killed.run_id]
    assert not everything.skipped and "Skipped" not in everything.text


def test_a_comparison_of_unfinished_runs_only_is_refused_naming_them(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "cmp", tmp_path / "mlartifacts")
    failed = tracker.start_run("pipeline")
    failed.finish("FAILED")
    with pytest.raises(RunSelectionError, match=r"1 did not finish; --include-unfinished"):
        compare(CompareSettings(uri, "cmp", tmp_path / "out"))
    with pytest.raises(RunSelectionError, match=rf"{failed.run_id[:8]} FAILED, failed"):
        compare(CompareSettings(uri, "cmp", tmp_path / "out", run_ids=(failed.run_id,)))
