"""Question answering through the finetune stage: a SQuAD 2.0 file the test writes, run as a
user-defined task (`format: squad`, `kind: question_answering`), scored by the official EM/F1
for each arm and both baselines, with the lift's intervals; the span skill beside it (EM/F1 on the
answerable questions, abstention off); and the answerable-only mode (`unanswerable: drop`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from flows.core.config import compose_config
from flows.downstream.settings import FinetuneSettings
from flows.downstream.statistics.qa_report import qa_summary_lines
from flows.stages.checkpoint_evaluation import evaluate_checkpoint
from flows.stages.finetune import finetune
from flows.summary import task_verdicts
from tests.fakes import TINY_TRAINER as TRAINER
from tests.fakes import WordShards, squad_articles


def qa_settings(directory: Path, entry: str, **fields: Any) -> FinetuneSettings:
    """A task the way a user adds one: a catalog entry composed from the command line."""
    config = compose_config(["finetune.tasks=[qa]", f"+finetune.catalog.qa={entry}"])
    return FinetuneSettings(
        tasks=["qa"],
        catalog={"qa": config["finetune"]["catalog"]["qa"]},
        data_dir=str(directory),
        **{
            "seeds": 2,
            "learning_rates": [3e-3],
            "epochs": 3,
            "max_length": 32,
            "bootstrap_samples": 100,
            **fields,
        },
    )


@pytest.fixture(scope="module")
def answered(
    word_shards: WordShards, word_encoder: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Any, FinetuneSettings]:
    directory = tmp_path_factory.mktemp("squad")
    (directory / "train.json").write_text(json.dumps(squad_articles(6, 20, seed=1)))
    (directory / "test.json").write_text(json.dumps(squad_articles(2, 20, seed=2)))
    settings = qa_settings(
        directory,
        "{format:squad,kind:question_answering,train:train.json,test:test.json}",
        epochs=6,
        batch_size=16,
    )
    settings.check_task_files(5)  # read, offsets checked and windows encoded up front
    ref = finetune(settings, 5, TRAINER, word_encoder, word_shards.tokenizer, word_shards.store)
    return ref, settings


def test_each_arm_and_baseline_gets_exact_match_and_f1(answered: Any) -> None:
    ref, _ = answered
    outputs = ref.outputs
    assert outputs["qa.metric"] == "f1"
    assert outputs["qa.baselines"] == "no_answer,lexical_overlap"
    for prefix in (
        "pretrained_",
        "random_init_",
        "baseline_no_answer_",
        "baseline_lexical_overlap_",
    ):
        for score in ("exact_match", "f1", "has_ans_f1", "no_ans_accuracy"):
            assert 0 <= outputs[f"qa.{prefix}{score}_mean"] <= 1
    # Half the test questions are unanswerable: answering nothing scores exactly that half.
    assert outputs["qa.baseline_no_answer_f1_mean"] == pytest.approx(0.5)
    assert outputs["qa.baseline_no_answer_no_ans_accuracy_mean"] == 1.0
    assert outputs["qa.baseline_no_answer_has_ans_f1_mean"] == 0.0
    low, high = (outputs[f"qa.lift_f1_bootstrap_{end}"] for end in ("low", "high"))
    assert low <= outputs["qa.lift_f1"] <= high
    assert "qa.lift_f1_ci_low" in outputs  # two seeds: a paired t-interval
    assert outputs["qa.test_examples"] == 40
    assert outputs["qa.test_windows"] >= 40  # long contexts took more than one window


def test_the_pretrained_encoder_learns_to_point_at_the_answer(answered: Any) -> None:
    """The answer is `fever` where the context holds it: fine-tuning must find it, above the
    lexical baseline (a whole sentence) on the answerable questions."""
    outputs = answered[0].outputs
    assert (
        outputs["qa.pretrained_has_ans_f1_mean"]
        > outputs["qa.baseline_lexical_overlap_has_ans_f1_mean"]
    )
    assert outputs["qa.pretrained_f1_mean"] > outputs["qa.baseline_no_answer_f1_mean"]
    assert outputs["qa.pretrained_has_ans_exact_match_mean"] > 0.5


def test_the_summary_shows_em_and_f1_per_arm_and_baseline(answered: Any) -> None:
    ref, _ = answered
    summary = (ref.path / "summary.md").read_text()
    header = (
        "|  | exact_match | f1 | has_ans_f1 | no_ans_accuracy | span_exact_match | span_f1 | "
        "null_threshold |"
    )
    assert header in summary
    for row in ("pretrained", "random init", "baseline: no_answer", "baseline: lexical_overlap"):
        assert f"| {row} | " in summary
    results = json.loads((ref.path / "results.json").read_text())
    groups = results["qa"]["pretrained"]["per_class"]
    assert (groups["HasAns"]["support"], groups["NoAns"]["support"]) == (20, 20)
    assert groups["HasAns"]["f1"] == pytest.approx(ref.outputs["qa.pretrained_has_ans_f1_mean"])
    predictions = json.loads((ref.path / "predictions.json").read_text())
    assert all(isinstance(answer, str) for answer in predictions["qa"]["pretrained"][0])


def test_each_run_records_the_null_threshold_it_fitted_on_validation(answered: Any) -> None:
    """results.json holds each run's threshold (-inf: it abstains everywhere); the outputs
    (MLflow's metrics) count those runs and hold the others' mean and std per arm, never a
    baseline's; the summary shows both."""
    ref, _ = answered
    results = json.loads((ref.path / "results.json").read_text())
    summary = (ref.path / "summary.md").read_text()
    rows = summary.split("\n")
    for arm, row in (("pretrained", "pretrained"), ("random_init", "random init")):
        thresholds = [run["null_threshold"] for run in results["qa"][arm]["runs"]]
        finite = [t for t in thresholds if math.isfinite(t)]
        assert len(thresholds) == 2 and all(t == -math.inf for t in set(thresholds) - set(finite))
        assert ref.outputs[f"qa.{arm}_abstaining_runs"] == 2 - len(finite)
        if finite:
            assert ref.outputs[f"qa.{arm}_null_threshold_mean"] == pytest.approx(mean(finite))
        cell = "abstains everywhere" if not finite else f"{mean(finite):.3f} ±"
        assert any(line.startswith(f"| {row} |") and cell in line for line in rows)
    assert "qa.baseline_no_answer_null_threshold_mean" not in ref.outputs
    assert [row.endswith(" | n/a |") for row in rows if row.startswith("| baseline:")] == [True] * 2


def test_the_span_skill_is_reported_per_arm_with_the_lift_s_two_intervals(
    answered: Any,
) -> None:
    """EM and F1 on the answerable test questions with the best span always given: at least the
    HasAns score (which abstains on some), with the lift's paired-t and bootstrap intervals, in
    the outputs (MLflow's metrics) and in a summary line above the table."""
    outputs = answered[0].outputs
    for arm in ("pretrained", "random_init"):
        for score in ("exact_match", "f1"):
            span = outputs[f"qa.{arm}_span_{score}_mean"]
            assert outputs[f"qa.{arm}_has_ans_{score}_mean"] <= span + 1e-9 <= 1 + 1e-9
    lift = outputs["qa.lift_span_f1"]
    assert lift == pytest.approx(
        outputs["qa.pretrained_span_f1_mean"] - outputs["qa.random_init_span_f1_mean"]
    )
    assert outputs["qa.lift_span_f1_ci_low"] <= lift <= outputs["qa.lift_span_f1_ci_high"]
    low, high = outputs["qa.lift_span_f1_bootstrap_low"], outputs["qa.lift_span_f1_bootstrap_high"]
    assert low <= lift <= high
    line = qa_summary_lines(outputs, "qa")[0]
    assert line.startswith("  span skill (span_f1: answerable test questions, best span always")
    assert f"pretrained {outputs['qa.pretrained_span_f1_mean']:.3f} ± " in line
    assert f"lift {lift:+.3f}; 95% CI paired t over seeds [" in line
    assert f"bootstrap over test questions [{low:+.3f}, {high:+.3f}]" in line


def test_a_single_file_has_validation_and_test_carved_by_article(
    answered: Any, word_shards: WordShards, word_encoder: Any, tmp_path: Path
) -> None:
    (tmp_path / "all.json").write_text(json.dumps(squad_articles(5, 10, seed=3)))
    settings = qa_settings(
        tmp_path,
        "{format:squad,kind:question_answering,train:all.json}",
        seeds=1,
        epochs=1,
        baselines=["no_answer"],
    )
    ref = finetune(settings, 5, TRAINER, word_encoder, word_shards.tokenizer, word_shards.store)
    assert ref.outputs["qa.test_examples"] == 10  # the last article of five
    assert "test carved: the last 1 article(s) of the train file" in ref.outputs["qa.caps"]
    assert "validation carved: 4 context(s) of train" in ref.outputs["qa.caps"]


def test_answerable_only_leaves_the_unanswerable_questions_out_and_never_abstains(
    answered: Any,
    word_shards: WordShards,
    word_encoder: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`unanswerable: drop` on a SQuAD 2.0 file: said once for the file, with its counts; every
    split answerable only; no threshold, so the plain F1 is the span F1."""
    (tmp_path / "all.json").write_text(json.dumps(squad_articles(5, 10, seed=3)))
    settings = qa_settings(
        tmp_path,
        "{format:squad,kind:question_answering,train:all.json,unanswerable:drop}",
        seeds=1,
        epochs=2,
        baselines=["lexical_overlap"],
    )
    with caplog.at_level("WARNING"):
        ref = finetune(settings, 5, TRAINER, word_encoder, word_shards.tokenizer, word_shards.store)
    said = [r.getMessage() for r in caplog.records if "unanswerable question(s)" in r.getMessage()]
    assert len(said) == 1
    assert said[0].endswith(
        "all.json holds 25 unanswerable question(s) of 50, left out of every split "
        "(finetune.catalog.qa.unanswerable=drop)"
    )
    outputs = ref.outputs
    assert outputs["qa.test_examples"] == 5  # the last article's answerable half
    assert "qa.pretrained_no_ans_accuracy_mean" not in outputs
    assert "qa.pretrained_abstaining_runs" not in outputs  # no threshold was fitted
    for arm in ("pretrained", "random_init"):
        assert outputs[f"qa.{arm}_f1_mean"] == outputs[f"qa.{arm}_span_f1_mean"]


def test_cloze_evaluate_prints_the_base_arm_s_span_skill_with_the_lift_s_intervals(
    answered: Any, word_shards: WordShards, word_encoder: Any
) -> None:
    """`cloze evaluate`'s stage on a QA task: its summary names the checkpoint's arm `base`, and
    the span line gives base and random init with base over random init's two intervals."""
    settings = answered[1].model_copy(
        update={"pretrained_learning_rates": [3e-3], "pretrained_epochs": 3}
    )
    ref = evaluate_checkpoint(
        settings, 5, TRAINER, word_encoder, word_shards.tokenizer, word_shards.store
    )
    lines = [line for task in task_verdicts(ref.outputs) for line in task]
    span = next(line for line in lines if line.startswith("  span skill"))
    assert f"base {ref.outputs['qa.pretrained_span_f1_mean']:.3f} ± " in span
    assert "random init " in span and "; base over random init " in span
    assert "paired t over seeds [" in span and "bootstrap over test questions [" in span
    assert "qa.random_init_abstaining_runs" in ref.outputs  # the QA table's figures too
