"""Multi-label classification: a set of labels per text or text pair (clinical notes with several
codes), an empty set allowed. Read from jsonl or parquet records whose label field is a list of
label names (flows/downstream/tasks/record_readers.py `record_label_sets`); a CSV or TSV file
holds one label per row, so neither format holds this kind.

The head is the classification head with one sigmoid per label: its targets are multi-hot
(a tuple per example, so the batch pads them as one row per example, not as tags), its loss binary
cross-entropy (lightning_modules/classifier.py, for float targets), and a label is predicted when
its logit is above 0 (probability 0.5). Scored on micro- and macro-F1 over labels: micro sums every
label's hits, predictions and gold; macro averages the F1 of the labels present in gold or
predicted, as classification's macro-F1 does. Both are sums over examples, so the bootstrap units
are each example's per-label (hit, predicted, gold) counts.

Baseline: `majority` predicts each label that most train examples carry, so usually the empty set:
what a model that learned only the labels' base rates scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flows.downstream.kinds.base import (
    Encoded,
    EncodeJob,
    HeadInputs,
    OneOutputPerExample,
    RecipeView,
)
from flows.downstream.kinds.classification import pooled_head
from flows.downstream.statistics.bootstrap import ratio
from flows.downstream.statistics.per_class import Report, class_scores
from flows.downstream.tasks.encoding import EncodedSplit
from flows.downstream.tasks.readers import LabelSetExample
from flows.downstream.tasks.spec import TaskSpec
from lightning_modules.models.config import EncoderConfig

if TYPE_CHECKING:  # torch: a head is built in the stage, never while a config is validated
    from torch import nn
    from torch.utils.data import DataLoader


def label_counts(
    gold: Sequence[Sequence[int]], predictions: Sequence[Sequence[int]], size: int
) -> np.ndarray:
    """Per example, each label's (hit, predicted, gold) count: `(examples, 3 * size)`, hits in
    the first `size` columns, predictions in the next, gold in the last."""
    counts = np.zeros((len(gold), 3 * size))
    for row, (truth, guess) in enumerate(zip(gold, predictions, strict=True)):
        for label in set(truth) & set(guess):
            counts[row, label] += 1.0
        for label in set(guess):
            counts[row, size + label] += 1.0
        for label in set(truth):
            counts[row, 2 * size + label] += 1.0
    return counts


def f1_of_totals(metric: str, totals: np.ndarray, size: int) -> np.ndarray:
    """Micro- or macro-F1 of each row of summed `label_counts`."""
    hits, predicted, gold = totals[:, :size], totals[:, size : 2 * size], totals[:, 2 * size :]
    if metric == "micro_f1":
        return ratio(2 * hits.sum(1), predicted.sum(1) + gold.sum(1))
    if metric != "macro_f1":
        raise ValueError(f"no multi-label form for metric {metric!r}")
    f1 = ratio(2 * hits, predicted + gold)
    present = (predicted + gold) > 0
    return ratio((f1 * present).sum(1), present.sum(1).astype(np.float64))


def majority_sets(train: list[LabelSetExample], size: int, count: int) -> list[list[int]]:
    """Each label that more than half of train carries, for every one of `count` examples."""
    carried = np.zeros(size)
    for example in train:
        carried[list(example.labels)] += 1
    chosen = [label for label in range(size) if carried[label] * 2 > len(train)]
    return [list(chosen) for _ in range(count)]


class MultiLabel(OneOutputPerExample):
    """A label set per example, sigmoid head, micro- and macro-F1."""

    name = "multi_label"
    has_labels = True
    decodes_spans = False
    prompts = False

    def unused_fields(self, recipe: RecipeView) -> set[str]:
        """The pooled head of classification: no relation head, no stride."""
        return {"relation_head", "doc_stride"}

    def score(
        self, gold: list[Any], predictions: Any, labels: list[str], negative: str | None
    ) -> dict[str, float]:
        totals = label_counts(gold, predictions, len(labels)).sum(0, keepdims=True)
        return {
            metric: float(f1_of_totals(metric, totals, len(labels))[0])
            for metric in ("micro_f1", "macro_f1")
        }

    def example_statistics(
        self, gold: Sequence[Any], predictions: Sequence[Any], labels: list[str]
    ) -> np.ndarray:
        return label_counts(gold, predictions, len(labels))

    def bootstrap_metric(
        self, metric: str, totals: np.ndarray, labels: list[str], negative: str | None
    ) -> np.ndarray:
        return f1_of_totals(metric, totals, len(labels))

    def per_class(self, gold: list[Any], predictions: list[Any], labels: list[str]) -> Report:
        totals = label_counts(gold, predictions, len(labels)).sum(0)
        size = len(labels)
        return {
            name: class_scores(
                int(totals[label]), int(totals[size + label]), int(totals[2 * size + label])
            )
            for label, name in enumerate(labels)
        }

    def fit_baseline(
        self, name: str, spec: TaskSpec, labels: list[str], splits: dict[str, list[Any]]
    ) -> tuple[Any, dict[str, float]]:
        if name == "majority":
            return majority_sets(splits["train"], len(labels), len(splits["test"])), {}
        raise ValueError(f"unknown baseline {name!r}")  # TaskSpec validates names first

    def encode(self, job: EncodeJob) -> Encoded:
        """Text (and pair) ids; the targets multi-hot, gold the sorted label ids."""
        size = len(job.labels)
        encoded = {}
        for name, examples in job.splits.items():
            encodings = job.tokenizer.encode_batch(
                [e.text if e.pair is None else (e.text, e.pair) for e in examples]
            )
            items = [
                {
                    "input_ids": encoding.ids,
                    "token_type_ids": encoding.type_ids
                    if job.token_types
                    else [0] * len(encoding.ids),
                    "labels": tuple(float(label in e.labels) for label in range(size)),
                }
                for encoding, e in zip(encodings, examples, strict=True)
            ]
            gold = [sorted(e.labels) for e in examples]
            truncated = sum(1 for encoding in encodings if encoding.overflowing)
            encoded[name] = EncodedSplit(items, gold, truncated)
        return Encoded(encoded)

    def predict(self, model: nn.Module, loader: DataLoader) -> list[Any]:
        """Per example, in split order, the labels whose logit is above 0."""
        import torch

        from lightning_modules.classifier import in_split_order

        was_training = model.training
        model.eval()
        predictions: list[Any] = []
        with torch.no_grad():
            for batch in loader:
                logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
                predictions.extend(row.nonzero().flatten().tolist() for row in logits > 0)
        model.train(was_training)
        return in_split_order(loader, predictions)

    def build_model(self, config: EncoderConfig, run: HeadInputs, source: Path | None) -> nn.Module:
        return pooled_head(config, run, source)


MULTI_LABEL = MultiLabel()
