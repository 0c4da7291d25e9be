"""A question-answering run's predictions: window logits decoded into one answer per question.

On a task with unanswerable questions (SQuAD 2.0) the null-score threshold is fitted on the
validation split's own decoding: while training, on the epoch's validation logits (the score that
picks the epoch and the learning rate); for test, on the chosen model's validation logits, then
applied to test unchanged. Test never sets it.
"""

from __future__ import annotations

from typing import Any

from flows.downstream.tasks.encoding import EncodedSplit
from flows.downstream.tasks.qa_decoding import WindowLogits, answers, candidates, fit_threshold
from flows.downstream.tasks.qa_encoding import QAEncodedSplit
from flows.downstream.tasks.spec import TaskSpec


def decoded_answers(
    splits: dict[str, EncodedSplit],
    split: str,
    logits: list[WindowLogits],
    validation: list[WindowLogits] | None,
    unanswerable: bool,
    metric: str,
) -> tuple[list[str], float | None]:
    """Answers to `split`'s questions from its window `logits`, and the null-score threshold they
    were cut at (None without `unanswerable`: every question answered), fitted on
    `validation`'s logits, or on `logits` when `split` is validation."""
    encoded = splits[split]
    assert isinstance(encoded, QAEncodedSplit)
    found = candidates(encoded, logits)
    if not unanswerable:
        return answers(found, None), None
    reference = splits["validation"]
    assert isinstance(reference, QAEncodedSplit)
    fitted = found if validation is None else candidates(reference, validation)
    threshold = fit_threshold(reference.gold, fitted, metric)
    return answers(found, threshold), threshold


def unanswerable_mode(spec: TaskSpec, train: list[Any]) -> bool:
    """SQuAD 2.0's no-answer prediction: as a question-answering task says, else as its train
    split holds unanswerable questions; never for another kind."""
    if spec.kind != "question_answering":
        return False
    if spec.unanswerable is not None:
        return spec.unanswerable
    return any(not example.answers for example in train)
