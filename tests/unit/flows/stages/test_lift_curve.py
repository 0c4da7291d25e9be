"""The lift-vs-compute curve: weights kept mid-pretraining, each evaluated like the final ones
against the same random-init runs, each point cached on its own, one chart over them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flows.downstream.statistics.lift_points import read_points
from flows.stages.finetune import finetune, stage_settings
from flows.stages.lift_curve import lift_curve
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
