"""Downstream metrics of classification, from label ids as tensors (label_metrics.py scores
entities and relations from their label names)."""

from __future__ import annotations

import torch


def accuracy(predictions: torch.Tensor, labels: torch.Tensor) -> float:
    return float((predictions == labels).float().mean()) if labels.numel() else 0.0


def macro_f1(predictions: torch.Tensor, labels: torch.Tensor, num_labels: int) -> float:
    """Unweighted mean of per-class F1 over classes present in labels or predictions."""
    scores = []
    for label in range(num_labels):
        predicted, actual = predictions == label, labels == label
        if not predicted.any() and not actual.any():
            continue
        true_positive = float((predicted & actual).sum())
        precision = true_positive / max(1.0, float(predicted.sum()))
        recall = true_positive / max(1.0, float(actual.sum()))
        scores.append(
            0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
        )
    return sum(scores) / len(scores) if scores else 0.0


def matthews_corrcoef(predictions: torch.Tensor, labels: torch.Tensor, num_labels: int) -> float:
    """Matthews correlation (CoLA's metric), multiclass form (Gorodkin 2004), as scikit-learn.

    0 when either side is constant: a model that always says "acceptable" gets no credit.
    """
    confusion = torch.zeros(num_labels, num_labels, dtype=torch.float64)
    confusion.index_put_((labels, predictions), torch.ones(len(labels), dtype=torch.float64), True)
    true_counts, predicted_counts = confusion.sum(1), confusion.sum(0)
    correct, total = confusion.trace(), confusion.sum()
    covariance = correct * total - true_counts @ predicted_counts
    spread = (total**2 - predicted_counts @ predicted_counts) * (
        total**2 - true_counts @ true_counts
    )
    return 0.0 if float(spread) == 0.0 else float(covariance / spread.sqrt())


def binary_f1(predictions: torch.Tensor, labels: torch.Tensor, positive: int = 1) -> float:
    """F1 of the positive class (MRPC's metric: 1 = paraphrase)."""
    predicted, actual = predictions == positive, labels == positive
    true_positive = float((predicted & actual).sum())
    denominator = float(predicted.sum()) + float(actual.sum())
    return 0.0 if denominator == 0 else 2 * true_positive / denominator
