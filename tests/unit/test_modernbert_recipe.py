"""`experiment=modernbert` and `model=modernbert-tiny` train through the real stages with every
objective family, export as ModernBertForMaskedLM, and resume."""

from __future__ import annotations

import json

import pytest

from flows.core.artifacts import ArtifactStore
from flows.core.config import compose_config
from flows.corpora import open_corpus
from flows.plan import PipelinePlan
from flows.stages.finetune import finetune
from flows.stages.init_source import HUGGINGFACE_DIR
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import pretrain
from flows.stages.shards.stage import build_shards
from flows.stages.tokenizer import train_tokenizer
from flows.stages.training_types import PretrainSettings
from tests.fakes import SHORT_RUN, WordShards, word_finetune
from tests.fakes import TINY_TRAINER as TRAINER
from tests.integration.pretrain_worker import MODERN_MODEL

# Rows of 64 tokens: a window of 32 keeps the local layers local.
MODERN_SHORT_RUN = [*SHORT_RUN, "model.local_attention=32"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ArtifactStore:
    return ArtifactStore(tmp_path_factory.mktemp("modernbert"))


def train(store: ArtifactStore, overrides: list[str]) -> dict:
    plan = PipelinePlan.from_config(compose_config([*overrides, *MODERN_SHORT_RUN]))
    corpus = open_corpus(plan.corpus)
    tokenizer = train_tokenizer(plan.tokenizer, corpus, store)
    shards = build_shards(plan.shards, corpus, tokenizer, store)
    result = pretrain(plan.pretrain, shards, tokenizer, store)
    return {"path": result.path, **result.outputs}


def test_the_modernbert_recipe_learns_and_exports_as_modernbert(store: ArtifactStore) -> None:
    outputs = train(store, ["experiment=modernbert"])
    assert outputs["steps"] == 20
    assert outputs["val_loss"] < outputs["initial_val_loss"]
    assert outputs["huggingface_export"]
    exported = json.loads((outputs["path"] / HUGGINGFACE_DIR / "config.json").read_text())
    assert exported["architectures"] == ["ModernBertForMaskedLM"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "objective",
    [
        ["objective.masking=static", "objective.static_copies=2"],
        ["objective=wwm"],
        ["objective=span"],
        ["objective=electra"],
    ],
    ids=["static", "whole_word", "span", "electra"],
)
def test_modernbert_tiny_trains_with_every_objective(
    store: ArtifactStore, objective: list[str]
) -> None:
    outputs = train(store, ["model=modernbert-tiny", *objective])
    assert outputs["steps"] == 20
    assert outputs["val_loss"] < outputs["initial_val_loss"]
    # ModernBERT has no ELECTRA class in transformers: the discriminator is kept, not exported.
    assert outputs["huggingface_export"] == (objective != ["objective=electra"])


def test_the_finetune_stage_evaluates_a_modernbert_encoder_like_any_other(
    word_shards: WordShards,
) -> None:
    store, tokenizer = word_shards.store, word_shards.tokenizer
    settings = PretrainSettings(MODERN_MODEL, ObjectiveSettings(), TRAINER, 0)
    pretrained = pretrain(settings, word_shards.shards, tokenizer, store)
    assert pretrained.outputs["huggingface_export"]
    tasks = word_finetune(
        word_shards, seeds=1, learning_rates=[3e-3], epochs=1, bootstrap_samples=100
    )
    outputs = finetune(tasks, 5, TRAINER, pretrained, tokenizer, store).outputs
    for arm in ("pretrained", "random_init"):
        assert 0.0 <= outputs[f"pairs.{arm}_accuracy_mean"] <= 1.0
    assert "pairs.lift_accuracy" in outputs
