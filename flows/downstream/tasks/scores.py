"""The scores of predictions against a split's gold labels: every metric of the task's kind.

Scores are computed per word on the *whole* sentence, so words cut off by `max_length` count as
predicted `O`: truncation costs recall, visibly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from lightning_modules.label_metrics import entity_scores, relation_scores
from lightning_modules.metrics import accuracy, binary_f1, macro_f1, matthews_corrcoef
from lightning_modules.squad_metrics import squad_scores

if TYPE_CHECKING:  # Lightning: not imported while a config is only being validated
    from lightning_modules.classifier import Predictions


def score(
    kind: str,
    gold: list[Any],
    predictions: Predictions,
    labels: list[str],
    negative: str | None = None,
) -> dict[str, float]:
    """Every metric of the task's kind; the recipe picks the configured one for selection. A
    relation task's F1s leave out its `negative` label ("no relation"); a question-answering
    task's predictions are answer texts, scored against each question's references."""
    if kind == "question_answering":
        return squad_scores(gold, predictions)
    if kind == "token_classification":
        predicted_tags = [
            [labels[tag] for tag in predicted] + ["O"] * (len(truth) - len(predicted))
            for truth, predicted in zip(gold, predictions, strict=True)
        ]
        gold_tags = [[labels[tag] for tag in truth] for truth in gold]
        return entity_scores(gold_tags, predicted_tags)
    predicted, truth = torch.tensor(predictions), torch.tensor(gold)
    if kind == "relation":
        names = [labels[label] for label in gold], [labels[label] for label in predictions]
        return {"accuracy": accuracy(predicted, truth), **relation_scores(*names, negative)}
    scores = {
        "accuracy": accuracy(predicted, truth),
        "macro_f1": macro_f1(predicted, truth, len(labels)),
        "mcc": matthews_corrcoef(predicted, truth, len(labels)),
    }
    if len(labels) == 2:
        scores["f1"] = binary_f1(predicted, truth, positive=1)
    return scores
