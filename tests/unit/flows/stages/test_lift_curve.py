"""The lift-vs-compute curve: weights kept mid-pretraining, each evaluated like the final ones
against the same random-init runs, each point cached on its own, one chart over them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flows.core.artifacts import MANIFEST_FILE, read_manifest
from flows.downstream.statistics.lift_points import read_points
from flows.stages.finetune import finetune, stage_settings
from flows.stages.lift_curve import CHECKPOINT_STAGE, lift_curve
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import KEPT_DIR, pretrain
from flows.stages.training_types import PretrainSettings
from lightning_modules.models.config import WEIGHTS_FILE
from tests.fakes import TINY_ENCODER, WordShards, word_finetune
from tests.fakes import TINY_TRAINER as TRAINER

TOKENS_PER_STEP = TRAINER.batch_size * 32  # batch x seq_len


@pytest.fixture(scope="module")
def curve(word_shards: WordShards) -> dict[str, Any]:
    store, tokenizer = word_shards.store, word_shards.tokenizer
    settings = PretrainSettings(
        TINY_ENCODER, ObjectiveSettings(), TRAINER, 0, keep_fractions=(0.5,)
    )
    pretrained = pretrain(settings, word_shards.shards, tokenizer, store)
    finetune_settings = word_finetune(word_shards, checkpoints=[0.5, 1.0])
    finetuned = finetune(finetune_settings, 5, TRAINER, pretrained, tokenizer, store)
    refs = {"pretrain": pretrained, "tokenizer": tokenizer, "finetune": finetuned}
    ref = lift_curve(finetune_settings, 5, TRAINER, refs, store)
    assert ref is not None
    return {"settings": finetune_settings, "refs": refs, "ref": ref, "store": store}


def test_pretraining_keeps_the_weights_at_each_fraction_of_its_budget(curve: Any) -> None:
    pretrained = curve["refs"]["pretrain"]
    assert pretrained.outputs["kept_checkpoints"] == {
        "0.5": {"steps": 2, "tokens": 2 * TOKENS_PER_STEP},
        "1": {"steps": 4, "tokens": 4 * TOKENS_PER_STEP},
    }
    halfway = pretrained.path / KEPT_DIR / "0.5" / WEIGHTS_FILE
    assert halfway.read_bytes() != (pretrained.path / WEIGHTS_FILE).read_bytes()


def test_each_point_is_the_lift_against_the_same_random_init_runs(curve: Any) -> None:
    ref, finetuned = curve["ref"], curve["refs"]["finetune"]
    points = read_points(ref.outputs)["pairs"]
    assert [point["tokens"] for point in points] == [2 * TOKENS_PER_STEP, 4 * TOKENS_PER_STEP]
    final = points[-1]
    assert final["lift"] == finetuned.outputs["pairs.lift_accuracy"]
    assert final["bootstrap_low"] == finetuned.outputs["pairs.lift_accuracy_bootstrap_low"]
    control = finetuned.outputs["pairs.random_init_accuracy_mean"]
    for point in points:
        assert point["lift"] == pytest.approx(point["pretrained_mean"] - control)
        assert point["ci_low"] <= point["lift"] <= point["ci_high"]
    assert (ref.path / "lift_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((ref.path / "curve.json").read_text())["fractions"] == [0.5, 1.0]


def test_a_second_request_is_a_cache_hit_and_the_fractions_stay_out_of_the_finetune_key(
    curve: Any,
) -> None:
    settings, refs, store = curve["settings"], curve["refs"], curve["store"]
    again = lift_curve(settings, 5, TRAINER, refs, store)
    assert again is not None and again.cache_hit and again.key == curve["ref"].key
    final_only = settings.model_copy(update={"checkpoints": [1.0]})
    assert stage_settings(final_only, 5, TRAINER) == stage_settings(settings, 5, TRAINER)
    assert lift_curve(final_only, 5, TRAINER, refs, store) is None


@pytest.fixture(scope="module")
def continued_curve(curve: Any, word_encoder: Any) -> dict[str, Any]:
    """The same pretraining read as the continuation of a checkpoint: `word_encoder` stands for
    the checkpoint it continued (the base arm loads whatever encoder weights a ref holds)."""
    settings, refs, store = curve["settings"], curve["refs"], curve["store"]
    settings = settings.model_copy(update={"pretrained_learning_rates": [3e-3]})
    finetuned = finetune(
        settings, 5, TRAINER, refs["pretrain"], refs["tokenizer"], store, base_ref=word_encoder
    )
    refs = {**refs, "finetune": finetuned, "checkpoint": word_encoder}
    ref = lift_curve(settings, 5, TRAINER, refs, store)
    assert ref is not None
    return {"ref": ref, "finetune": finetuned, "plain": curve["ref"]}


def test_a_continued_checkpoint_gets_adapted_over_base_at_each_point(continued_curve: Any) -> None:
    ref, finetuned = continued_curve["ref"], continued_curve["finetune"]
    points = read_points(ref.outputs)["pairs"]
    final = points[-1]
    assert final["over_base"] == finetuned.outputs["pairs.over_base_accuracy"]
    assert (
        final["over_base_bootstrap_low"]
        == (finetuned.outputs["pairs.over_base_accuracy_bootstrap_low"])
    )
    base = finetuned.outputs["pairs.base_accuracy_mean"]
    for point in points:
        assert point["over_base"] == pytest.approx(point["pretrained_mean"] - base)
        assert point["over_base_ci_low"] <= point["over_base"] <= point["over_base_ci_high"]
        assert point["over_base_bootstrap_low"] <= point["over_base_bootstrap_high"]
    assert (ref.path / "over_base_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_continued_checkpoints_points_tune_on_the_checkpoint_grid(
    continued_curve: Any, curve: Any
) -> None:
    """The arms that start from a checkpoint's weights tune on `pretrained_learning_rates` at
    every point, not only at 1.0 (3e-3 here; the task's grid is 1e-2)."""
    store = curve["store"]

    def halfway(curve_ref: Any) -> Any:
        inputs = read_manifest(curve_ref.path / MANIFEST_FILE)["inputs"]
        return store.lookup(CHECKPOINT_STAGE, inputs["0.5"]).outputs

    assert halfway(continued_curve["ref"])["pairs.pretrained_learning_rate"] == 3e-3
    assert halfway(continued_curve["plain"])["pairs.pretrained_learning_rate"] == 1e-2
