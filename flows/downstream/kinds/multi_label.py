"""Multi-label classification: a set of labels per text or text pair (clinical notes with several
codes), an empty set allowed unless the task says otherwise. Read from jsonl or parquet records
whose label field is a list of label names, or from a CSV column that holds them separated by the
task's `label_separator` (flows/downstream/tasks/record_readers.py).

The head is the classification head with one sigmoid per label: its targets are multi-hot
(a tuple per example, so the batch pads them as one row per example, not as tags), its loss binary
cross-entropy (lightning_modules/classifier.py, for float targets). It predicts a probability per
label; a label is predicted when its probability is above that label's threshold, chosen on the
validation split's probabilities from `THRESHOLDS` (the one whose F1 of the label is highest, 0.5
on a tie): on each epoch's validation probabilities while training (the score that picks the
epoch and the learning rate), and for test on the chosen model's validation probabilities, then
applied to test unchanged. A rare label whose probabilities never reach 0.5 is still predicted,
and test never sets a threshold. Each run records its thresholds (results.json
`label_thresholds`, in label order); summary.md shows them per arm.

Scored on micro- and macro-F1 over labels: micro sums every label's hits, predictions and gold;
macro averages the F1 of the labels present in gold or predicted, as classification's macro-F1
does. Both are sums over examples, so the bootstrap units are each example's per-label (hit,
predicted, gold) counts.

Baselines: `majority` predicts each label that most train examples carry, so usually the empty set:
what a model that learned only the labels' base rates scores. `tfidf_logreg` is classification's
TF-IDF baseline made one-vs-rest: the same features and C grid (classification.py), a logistic
regression per label, each label's threshold chosen on validation as the encoder's are.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING, Any

import numpy as np

from flows.core.tables import markdown_table
from flows.downstream.kinds.base import (
    Decision,
    Encoded,
    EncodeJob,
    HeadInputs,
    OneOutputPerExample,
    RecipeView,
)
from flows.downstream.kinds.classification import Scorer, best_c, pooled_head, tfidf_features
from flows.downstream.statistics.bootstrap import ratio
from flows.downstream.statistics.per_class import Report, class_scores, per_class_markdown
from flows.downstream.tasks.encoding import EncodedSplit
from flows.downstream.tasks.readers import LabelSetExample
from flows.downstream.tasks.spec import TaskSpec
from lightning_modules.models.config import EncoderConfig

if TYPE_CHECKING:  # torch: a head is built in the stage, never while a config is validated
    from torch import nn
    from torch.utils.data import DataLoader

# The thresholds a label's probability may be cut at, nearest 0.5 first: of equally good ones the
# first wins, so a tie (a label validation never shows scores alike everywhere) keeps 0.5.
THRESHOLDS = (0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8, 0.1, 0.9)
TFIDF = "tfidf_logreg"
THRESHOLD_CHOICE = "threshold "  # a TF-IDF fit's choice of a label's threshold: `threshold flu`


def multi_hot(label_sets: Sequence[Sequence[int]], size: int) -> np.ndarray:
    """`(examples, size)` booleans: which labels each example carries."""
    rows = np.zeros((len(label_sets), size), dtype=bool)
    for row, labels in enumerate(label_sets):
        rows[row, list(labels)] = True
    return rows


def label_thresholds(probabilities: np.ndarray, gold: Sequence[Sequence[int]]) -> list[float]:
    """Per label (a column of `probabilities`, a row per example), the threshold of `THRESHOLDS`
    at which the label's F1 over `gold` is highest; the first of equals."""
    truth = multi_hot(gold, probabilities.shape[1])
    f1 = []
    for threshold in THRESHOLDS:
        predicted = probabilities > threshold
        hits = (predicted & truth).sum(0).astype(np.float64)
        f1.append(ratio(2 * hits, (predicted.sum(0) + truth.sum(0)).astype(np.float64)))
    return [THRESHOLDS[best] for best in np.argmax(np.stack(f1), axis=0)]


def cut(probabilities: np.ndarray, thresholds: Sequence[float]) -> list[list[int]]:
    """Per example, the labels whose probability is above their threshold."""
    above = probabilities > np.asarray(thresholds)
    return [row.nonzero()[0].tolist() for row in above]


def as_rows(probabilities: Sequence[Sequence[float]], size: int) -> np.ndarray:
    return np.asarray(probabilities, dtype=np.float64).reshape(-1, size)


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


def tfidf_one_vs_rest(
    spec: TaskSpec, labels: list[str], splits: dict[str, list[LabelSetExample]], score: Scorer
) -> tuple[list[list[int]], dict[str, float]]:
    """Test predictions of the C whose `score` is best on validation, each label cut at its
    threshold chosen on validation at that C; the choices: C and each label's threshold."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    size = len(labels)
    features, held_out, test_features = tfidf_features(splits)
    targets = multi_hot([example.labels for example in splits["train"]], size).astype(int)
    gold = [sorted(example.labels) for example in splits["validation"]]
    model = OneVsRestClassifier(LogisticRegression(max_iter=1000))

    def fit(c: float) -> tuple[float, tuple[Any, list[float]]]:
        with warnings.catch_warnings():
            # A label every train example carries, or none does, is predicted as constant: the
            # right fit, not a fault to warn of.
            warnings.filterwarnings("ignore", "Label .* is present in all training examples")
            model.set_params(estimator__C=c).fit(features, targets)
        probabilities = model.predict_proba(held_out)
        thresholds = label_thresholds(probabilities, gold)
        predicted = cut(probabilities, thresholds)
        validation_score = score(gold, predicted, labels, None)[spec.metric]
        return validation_score, (copy.deepcopy(model), thresholds)

    c, (best, thresholds) = best_c(fit)
    choices = {"C": c}
    choices.update(
        {f"{THRESHOLD_CHOICE}{name}": t for name, t in zip(labels, thresholds, strict=True)}
    )
    return cut(best.predict_proba(test_features), thresholds), choices


def threshold_markdown(task: str, record: Mapping[str, Any], arms: list[str]) -> str:
    """Each label's threshold as chosen on validation, per arm (mean over its runs, their range
    where they differ) and for the TF-IDF baseline (over its fits)."""
    names = record["labels"]["names"]
    columns = {arm: [run["label_thresholds"] for run in record[arm]["runs"]] for arm in arms}
    if TFIDF in record["baselines"]:  # unless finetune.baselines leaves it out
        columns[f"baseline {TFIDF}"] = [
            [choice[f"{THRESHOLD_CHOICE}{name}"] for name in names]
            for choice in record["baselines"][TFIDF]["choices"]
        ]

    def cell(chosen: list[float]) -> str:
        low, high = min(chosen), max(chosen)
        spread = f" ({low:.1f}-{high:.1f})" if low != high else ""
        return f"{fmean(chosen):.2f}{spread}"

    rows = [
        [name, *(cell([run[label] for run in runs]) for runs in columns.values())]
        for label, name in enumerate(names)
    ]
    return (
        f"Per-label thresholds, {task} (chosen on validation; 0.5 unless validation moved it):"
        "\n\n" + markdown_table(["label", *columns], rows)
    )


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
        if name == TFIDF:
            return tfidf_one_vs_rest(spec, labels, splits, self.score)
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
        """Per example, in split order, each label's probability (`decide` cuts them)."""
        import torch

        from lightning_modules.classifier import in_split_order

        was_training = model.training
        model.eval()
        probabilities: list[Any] = []
        with torch.no_grad():
            for batch in loader:
                logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
                probabilities.extend(torch.sigmoid(logits.float()).tolist())
        model.train(was_training)
        return in_split_order(loader, probabilities)

    def decide(
        self,
        outputs: list[Any],
        validation: Callable[[], list[Any]],
        gold: list[Any],
        labels: list[str],
    ) -> Decision:
        """Each label's threshold chosen on validation's probabilities, `outputs` cut at them."""
        size = len(labels)
        thresholds = label_thresholds(as_rows(validation(), size), gold)
        return Decision(cut(as_rows(outputs, size), thresholds), thresholds)

    def build_model(self, config: EncoderConfig, run: HeadInputs, source: Path | None) -> nn.Module:
        return pooled_head(config, run, source)

    def summary(
        self, task: str, outputs: Mapping[str, Any], record: Mapping[str, Any], arms: list[str]
    ) -> str:
        """The per-label table (macro-F1 averages its rows) and each label's threshold."""
        per_label = per_class_markdown(task, dict(record), arms)
        return f"{per_label}\n\n{threshold_markdown(task, record, arms)}"


MULTI_LABEL = MultiLabel()
