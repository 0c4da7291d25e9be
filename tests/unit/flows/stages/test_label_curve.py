"""The label-efficiency curve: every task evaluated again at each count of labelled examples per
seed, each point a finetune evaluation of its own (the random-init arm cached per count), one
chart and one table over them, a summary line per count and the sentence that reads the curve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.core.artifacts import ArtifactRef
from flows.downstream.statistics.label_points import count_label, crossing, read_label_points
from flows.stages.control_arm import CONTROL_STAGE
from flows.stages.finetune import STAGE as FINETUNE_STAGE
from flows.stages.finetune import finetune, stage_settings
from flows.stages.label_curve import at_count, label_curve
from flows.summary import label_curve_result
from tests.fakes import TINY_TRAINER as TRAINER
from tests.fakes import WordShards, word_finetune


def artifacts(store_root: Path, stage: str) -> set[str]:
    return {path.name for path in (store_root / stage).iterdir() if not path.name.startswith(".")}


@pytest.fixture(scope="module")
def curve(word_shards: WordShards, word_encoder: ArtifactRef) -> dict[str, Any]:
    store, tokenizer = word_shards.store, word_shards.tokenizer
    settings = word_finetune(word_shards, train_examples=200, label_counts=[50, 200])
    finetuned = finetune(settings, 5, TRAINER, word_encoder, tokenizer, store)
    finetunes = artifacts(store.root, FINETUNE_STAGE)
    controls = artifacts(store.root, CONTROL_STAGE)
    refs = {"pretrain": word_encoder, "tokenizer": tokenizer, "finetune": finetuned}
    ref = label_curve(settings, 5, TRAINER, refs, store)
    assert ref is not None
    return {
        "settings": settings,
        "refs": refs,
        "ref": ref,
        "store": store,
        "new_finetunes": artifacts(store.root, FINETUNE_STAGE) - finetunes,
        "new_controls": artifacts(store.root, CONTROL_STAGE) - controls,
    }


def test_each_count_is_a_full_evaluation_of_both_arms_beside_the_baselines(curve: Any) -> None:
    points = read_label_points(curve["ref"].outputs)["pairs"]
    assert [point["labels"] for point in points] == [50, 200]
    for point in points:
        assert point["lift"] == pytest.approx(point["pretrained_mean"] - point["random_init_mean"])
        assert point["ci_low"] <= point["lift"] <= point["ci_high"]
        assert point["random_init_low"] <= point["random_init_mean"] <= point["random_init_high"]
        assert {"baseline_majority", "baseline_tfidf_logreg"} <= set(point)


def test_the_run_own_count_is_its_finetune_artifact_and_each_other_count_one_more(
    curve: Any,
) -> None:
    """200 labels is the run's own `train_examples`: that point is the finetune stage's artifact,
    read back; 50 is evaluated once, its random-init arm cached like the run's control."""
    outputs, finetuned = curve["ref"].outputs, curve["refs"]["finetune"]
    assert outputs["pairs.n200.lift"] == finetuned.outputs["pairs.lift_accuracy"]
    assert len(curve["new_finetunes"]) == 1 and len(curve["new_controls"]) == 1


def test_the_chart_the_table_and_a_summary_line_per_count(curve: Any) -> None:
    ref = curve["ref"]
    assert (ref.path / "label_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (ref.path / "label_curve.md").read_text()
    assert "| labels per seed | pretrained | random init | lift |" in table
    assert ref.outputs["pairs.crossing"] in table
    lines = label_curve_result({**ref.outputs, "cache_hit": False})
    assert lines[0] == "  label curve [computed]:"
    assert lines[1].startswith("    pairs accuracy at 50 labels: pretrained ")
    assert lines[2].startswith("    pairs accuracy at 200 labels: pretrained ")
    assert lines[3] == f"    {ref.outputs['pairs.crossing']}"


def test_a_second_request_is_a_cache_hit_and_the_counts_stay_out_of_the_finetune_key(
    curve: Any,
) -> None:
    settings, refs, store = curve["settings"], curve["refs"], curve["store"]
    again = label_curve(settings, 5, TRAINER, refs, store)
    assert again is not None and again.cache_hit and again.key == curve["ref"].key
    no_curve = settings.model_copy(update={"label_counts": None})
    assert stage_settings(no_curve, 5, TRAINER) == stage_settings(settings, 5, TRAINER)
    assert label_curve(no_curve, 5, TRAINER, refs, store) is None


def point(labels: int, low: float, high: float) -> dict[str, float]:
    return {"labels": labels, "lift": (low + high) / 2, "ci_low": low, "ci_high": high}


def test_the_sentence_names_where_the_lift_interval_stops_excluding_zero() -> None:
    shrinking = [point(32, 0.1, 0.3), point(100, 0.02, 0.2), point(300, -0.01, 0.1)]
    assert crossing(shrinking, 0.95) == (
        "The lift's 95% interval (paired t over seeds) excludes zero up to 32 and 100 labels and "
        "no longer from 300 labels on."
    )
    assert crossing(shrinking[:2], 0.9) == (
        "The lift's 90% interval (paired t over seeds) excludes zero at every count run, 32 to "
        "100 labels."
    )
    assert crossing(shrinking[2:], 0.95).endswith("includes zero at every count run, 300 labels.")
    growing = [point(10, -0.05, 0.25), *shrinking[:2]]
    assert crossing(growing, 0.95) == (
        "The lift's 95% interval (paired t over seeds) includes zero at 10 labels only, and "
        "excludes it at 32 and 100 labels."
    )


def test_a_count_sets_the_task_own_train_examples_and_all_is_the_whole_pool(
    word_shards: WordShards,
) -> None:
    settings = word_finetune(
        word_shards, ["pairs", "tags"], train_examples=200, label_counts=[100, "all"]
    )
    assert settings.curve_counts == [100, None]
    for count in settings.curve_counts:
        point = at_count(settings, "tags", count)
        (task,) = point.plan
        assert point.tasks == ["tags"] and task.recipe.train_examples == count
    assert [count_label(count) for count in settings.curve_counts] == ["n100", "nall"]
