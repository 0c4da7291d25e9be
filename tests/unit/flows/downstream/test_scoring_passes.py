"""Fine-tuning's batches. Scoring passes (validation after each epoch, test at the end): at the
run's precision, in length order, and answered in the split's order; a QA epoch's window logits
decoded once for both its score and its tiebreak. Training: shuffled by the seed, in batches of
like length unless `finetune.group_by_length` is off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

from flows.downstream.evaluate import prepare_task
from flows.downstream.finetuning import recipe
from flows.downstream.finetuning.qa_runs import decoded_answers, span_scores
from flows.downstream.finetuning.recipe import SplitDataset, TaskRun, build_model, pad_batch
from flows.downstream.settings import FinetuneSettings
from flows.stages.finetune import stage_sources
from lightning_modules import classifier
from lightning_modules.classifier import LengthGroups, LengthOrder, predict, predict_spans
from tests.fakes import TINY_TRAINER, WordShards, squad_articles, word_finetune


def tagging_run(
    shards: WordShards, encoder: Any, work: Path, precision: str, **fields: Any
) -> TaskRun:
    settings = word_finetune(shards, tasks=("tags",), epochs=1, **fields)
    return task_run(shards, encoder, work, precision, settings)


def qa_run(shards: WordShards, encoder: Any, work: Path) -> TaskRun:
    """A SQuAD 2.0 task over the word tasks' words: half its questions unanswerable."""
    (work / "train.json").write_text(json.dumps(squad_articles(4, 10, seed=1)))
    (work / "test.json").write_text(json.dumps(squad_articles(1, 10, seed=2)))
    entry = {"format": "squad", "kind": "question_answering"}
    settings = word_finetune(
        shards,
        tasks=("qa",),
        catalog={"qa": {**entry, "train": "train.json", "test": "test.json"}},
        data_dir=str(work),
        epochs=2,
        max_length=32,
    )
    return task_run(shards, encoder, work, "32-true", settings)


def task_run(
    shards: WordShards, encoder: Any, work: Path, precision: str, settings: FinetuneSettings
) -> TaskRun:
    trainer = TINY_TRAINER.model_copy(update={"precision": precision})
    sources = stage_sources(
        settings, 5, trainer, shards.tokenizer, encoder.path, work, lambda task, label: ()
    )
    return prepare_task(settings.plan[0], sources)[1]


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


def test_a_qa_validation_pass_decodes_its_window_logits_once(
    word_shards: WordShards, word_encoder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decoding is most of a QA epoch's scoring: the metric and the span F1 tiebreak share it."""
    decoded: list[str] = []

    def counted(splits: Any, split: str, *rest: Any) -> Any:
        decoded.append(split)
        return decoded_answers(splits, split, *rest)

    monkeypatch.setattr(recipe, "decoded_answers", counted)
    result = recipe.train_once(qa_run(word_shards, word_encoder, tmp_path), "pretrained", 1e-2, 5)
    assert len(result.validation_scores) == 2
    assert decoded == ["validation", "validation", "test"]


def test_a_qa_epoch_s_score_and_tiebreak_are_those_of_decoding_for_each_alone(
    word_shards: WordShards, word_encoder: Any, tmp_path: Path
) -> None:
    run = qa_run(word_shards, word_encoder, tmp_path)
    assert run.unanswerable  # the threshold is fitted on these logits too
    logits = predict_spans(build_model(run, "pretrained"), run.loader("validation", 5))
    items = run.splits["validation"].items
    for window in range(0, len(logits), 2):  # every other window points at its gold span
        first, last = items[window]["labels"]
        logits[window][0][first] += 10.0
        logits[window][1][last] += 10.0
    metric = run.metrics("validation", run.decoded("validation", logits).answers)[run.spec.metric]
    spans = span_scores(run.splits["validation"].gold, run.decoded("validation", logits).spans)
    assert 0 < spans["span_f1"] < 1 and 0 < metric < 1
    assert run.validation_score(logits) == (metric, spans["span_f1"])
