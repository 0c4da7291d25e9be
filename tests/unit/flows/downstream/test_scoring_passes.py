"""Fine-tuning's batches. Scoring passes (validation after each epoch, test at the end): at the
run's precision, in length order, and answered in the split's order. Training: shuffled by the
seed, in batches of like length unless `finetune.group_by_length` is off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

from flows.downstream.finetuning import recipe
from flows.downstream.finetuning.recipe import SplitDataset, TaskRun, build_model, pad_batch
from flows.stages.finetune import prepare_task
from lightning_modules import classifier
from lightning_modules.classifier import LengthGroups, LengthOrder, predict
from tests.fakes import TINY_TRAINER, WordShards, word_finetune


def tagging_run(
    shards: WordShards, encoder: Any, work: Path, precision: str, **fields: Any
) -> TaskRun:
    settings = word_finetune(shards, tasks=("tags",), epochs=1, **fields)
    trainer = TINY_TRAINER.model_copy(update={"precision": precision})
    return prepare_task(
        settings.plan[0].spec,
        settings,
        5,
        shards.tokenizer,
        encoder.path,
        trainer,
        work,
        lambda task, label: (),
    )[1]


def test_length_order_reads_shortest_first_ties_in_order_and_restores_split_order() -> None:
    order = LengthOrder([5, 2, 9, 2, 7])
    assert list(order) == [1, 3, 0, 4, 2]
    assert order.restore(["b", "d", "a", "e", "c"]) == ["a", "b", "c", "d", "e"]


def test_scoring_batches_go_by_length_and_predictions_come_back_in_split_order(
    word_shards: WordShards, word_encoder: Any, tmp_path: Path
) -> None:
    run = tagging_run(word_shards, word_encoder, tmp_path, "32-true")
    loader = run.loader("validation", 5)
    assert isinstance(loader.sampler, LengthOrder)
    one_by_one = DataLoader(
        SplitDataset(run.split("validation", 5)),
        batch_size=1,
        collate_fn=lambda items: pad_batch(items, run.pad_id),
    )
    model = build_model(run, "pretrained")
    assert predict(model, loader) == predict(model, one_by_one)  # no padding at all: split order


def test_training_batches_are_of_like_length_unless_turned_off(
    word_shards: WordShards, word_encoder: Any, tmp_path: Path
) -> None:
    grouped = tagging_run(word_shards, word_encoder, tmp_path, "32-true").loader("train", 5, True)
    assert isinstance(grouped.sampler, LengthGroups) and grouped.sampler.seed == 5
    shuffled = tagging_run(word_shards, word_encoder, tmp_path, "32-true", group_by_length=False)
    assert isinstance(shuffled.loader("train", 5, shuffle=True).sampler, RandomSampler)


@pytest.mark.parametrize(("precision", "autocast"), [("bf16-mixed", True), ("32-true", False)])
def test_validation_and_test_predictions_run_at_the_runs_precision(
    word_shards: WordShards,
    word_encoder: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    precision: str,
    autocast: bool,
) -> None:
    """Lightning autocasts its own steps only; scoring from a callback ran in fp32."""
    seen: list[bool] = []

    def probed(model: torch.nn.Module, loader: DataLoader) -> Any:
        seen.append(torch.is_autocast_enabled("cpu"))
        return predict(model, loader)

    monkeypatch.setattr(classifier, "predict", probed)  # what the task's kind predicts with
    run = tagging_run(word_shards, word_encoder, tmp_path, precision)
    recipe.train_once(run, "pretrained", 1e-2, 5)
    assert seen == [autocast, autocast]  # the epoch's validation, then the test split
