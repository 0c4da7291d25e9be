"""Classification metrics computed from predicted and true label ids."""

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
