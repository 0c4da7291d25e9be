"""Test-set variance: a paired bootstrap over test examples of the lift, averaged over seeds.

The paired t-interval over seeds (report.py) covers training noise and, in limited-label mode, the
draw of labelled examples; it treats the test split as fixed. A different test split of the same
size would give a different lift: this interval covers that. Each replicate resamples the test
examples once (with replacement) and rescored *every* run on that same resample, so the arms stay
paired, and the replicate's lift is the mean over seeds of pretrained minus random init.

Every metric here is a function of sums over examples (a confusion matrix; entity true positive,
predicted and gold counts), so a replicate is a weighted sum: a `(replicates, examples)` matrix of
resample counts times a per-example statistics matrix, with no Python loop per replicate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

# The metric of each row of summed example statistics `(replicates, k)`: the task kind's
# (flows/downstream/kinds/, `bootstrap_metric`), with its task's metric and labels bound.
MetricOfTotals = Callable[[np.ndarray], np.ndarray]


def ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """`numerator / denominator`, 0 where the denominator is 0 (a class never predicted)."""
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator != 0)


def confusion_cells(gold: Sequence[int], predictions: Sequence[int], size: int) -> np.ndarray:
    """Per example, the one-hot cell `gold * size + predicted` of a `size x size` confusion
    matrix: the units of every metric of one label per example."""
    cells = np.asarray(gold, dtype=np.int64) * size + np.asarray(predictions, dtype=np.int64)
    statistics = np.zeros((len(cells), size * size))
    statistics[np.arange(len(cells)), cells] = 1.0
    return statistics


def confusion_metric(
    metric: str, totals: np.ndarray, num_labels: int, types: np.ndarray | None = None
) -> np.ndarray:
    """A metric of summed confusion cells; the same definitions as lightning_modules/metrics.py
    (a test checks that unit weights give the point estimate). `types`
    (flows/downstream/tasks/relation.py `type_matrix`) makes the F1s a relation task's."""
    confusion = totals.reshape(-1, num_labels, num_labels)
    actual, predicted = confusion.sum(2), confusion.sum(1)
    correct = np.trace(confusion, axis1=1, axis2=2)
    total = confusion.sum((1, 2))
    if metric == "accuracy":
        return ratio(correct, total)
    if types is not None:
        return relation_f1(metric, confusion, types)
    if metric == "f1":  # binary, label 1 positive
        return ratio(2 * confusion[:, 1, 1], predicted[:, 1] + actual[:, 1])
    if metric == "macro_f1":
        diagonal = np.diagonal(confusion, axis1=1, axis2=2)
        precision = diagonal / np.maximum(predicted, 1.0)
        recall = diagonal / np.maximum(actual, 1.0)
        f1 = ratio(2 * precision * recall, precision + recall)
        present = (predicted > 0) | (actual > 0)
        return ratio((f1 * present).sum(1), present.sum(1).astype(np.float64))
    if metric == "mcc":
        covariance = correct * total - (actual * predicted).sum(1)
        spread = (total**2 - (predicted**2).sum(1)) * (total**2 - (actual**2).sum(1))
        return ratio(covariance, np.sqrt(spread))
    raise ValueError(f"no bootstrap form for metric {metric!r}")


def relation_f1(metric: str, confusion: np.ndarray, types: np.ndarray) -> np.ndarray:
    """Micro- or macro-F1 over the relation types present in gold: a hit is an exact label
    (direction included), a prediction or gold example counts for its label's type."""
    hits = np.diagonal(confusion, axis1=1, axis2=2) @ types
    predicted, gold = confusion.sum(1) @ types, confusion.sum(2) @ types
    present = gold > 0
    if metric == "micro_f1":
        return ratio(2 * (hits * present).sum(1), ((predicted + gold) * present).sum(1))
    if metric != "macro_f1":
        raise ValueError(f"no bootstrap form for relation metric {metric!r}")
    f1 = ratio(2 * hits, predicted + gold)
    return ratio((f1 * present).sum(1), present.sum(1).astype(np.float64))


def count_metric(metric: str, totals: np.ndarray) -> np.ndarray:
    """Entity precision, recall or F1 of summed `(true positive, predicted, gold)` counts."""
    true_positive, predicted, gold = totals[:, 0], totals[:, 1], totals[:, 2]
    precision, recall = ratio(true_positive, predicted), ratio(true_positive, gold)
    scores = {
        "entity_precision": precision,
        "entity_recall": recall,
        "entity_f1": ratio(2 * precision * recall, precision + recall),
    }
    return scores[metric]


def bootstrap_lift(
    pretrained: Sequence[np.ndarray],
    random_init: Sequence[np.ndarray],
    metric_of: MetricOfTotals,
    replicates: int,
    confidence: float,
    seed: int,
) -> tuple[float, float]:
    """Percentile interval of the seed-averaged lift over `replicates` test resamples.

    `pretrained[i]` and `random_init[i]` are the example statistics of seed i's two runs, all on
    the same test examples in the same order; `metric_of` the task's metric of summed statistics.
    """
    examples = len(pretrained[0])
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(examples, np.full(examples, 1.0 / examples), size=replicates)
    weights = weights.astype(np.float64)
    lifts = np.zeros(replicates)
    for pre, rand in zip(pretrained, random_init, strict=True):
        lifts += metric_of(weights @ pre)
        lifts -= metric_of(weights @ rand)
    lifts /= len(pretrained)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(lifts, [tail, 100 - tail])
    return float(low), float(high)
