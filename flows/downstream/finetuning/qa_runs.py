"""A question-answering run's predictions: window logits decoded into one answer per question.

On a task with unanswerable questions (SQuAD 2.0) the null-score threshold is fitted on the
validation split's own decoding: while training, on the epoch's validation logits (the score that
picks the epoch and the learning rate); for test, on the chosen model's validation logits, then
applied to test unchanged. Test never sets it.

Beside the task's score, every run is scored on its span skill: exact match and F1 on the
answerable questions alone with abstention off (each question gets its best span). A SQuAD 2.0
score can sit at the share of unanswerable questions (abstaining everywhere) while the encoder
finds answers: the span scores show what the overall F1 hides, and break the ties of a grid whose
every rate abstains everywhere on validation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flows.downstream.tasks.encoding import EncodedSplit
from flows.downstream.tasks.qa_decoding import WindowLogits, answers, candidates, fit_threshold
from flows.downstream.tasks.qa_encoding import QAEncodedSplit
from lightning_modules.squad_metrics import has_answer, squad_scores

SPAN = "span_"  # `span_exact_match`, `span_f1`: a run's test scores of the span skill


@dataclass(frozen=True)
class Decoded:
    """A split's answers, the threshold they were cut at (None: every question answered), and
    every question's best span (abstention off); another kind's predictions, and a multi-label
    task's threshold per label (chosen on validation)."""

    answers: list[Any]
    threshold: float | None
    spans: list[str]
    label_thresholds: list[float] | None = None


def decoded_answers(
    splits: dict[str, EncodedSplit],
    split: str,
    logits: list[WindowLogits],
    validation: list[WindowLogits] | None,
    unanswerable: bool,
    metric: str,
) -> Decoded:
    """Answers to `split`'s questions from its window `logits`, cut at the null-score threshold
    (without `unanswerable`: every question answered) fitted on `validation`'s logits, or on
    `logits` when `split` is validation."""
    encoded = splits[split]
    assert isinstance(encoded, QAEncodedSplit)
    found = candidates(encoded, logits)
    spans = answers(found, None)
    if not unanswerable:
        return Decoded(spans, None, spans)
    reference = splits["validation"]
    assert isinstance(reference, QAEncodedSplit)
    fitted = found if validation is None else candidates(reference, validation)
    threshold = fit_threshold(reference.gold, fitted, metric)
    return Decoded(answers(found, threshold), threshold, spans)


def span_scores(gold: Sequence[Sequence[str]], spans: Sequence[str]) -> dict[str, float]:
    """`span_exact_match` and `span_f1` over the answerable questions, each answered with its
    best span; none when no question is answerable."""
    kept = [
        (answers, span) for answers, span in zip(gold, spans, strict=True) if has_answer(answers)
    ]
    if not kept:
        return {}
    scores = squad_scores([answers for answers, _ in kept], [span for _, span in kept])
    return {f"{SPAN}{name}": scores[name] for name in ("exact_match", "f1")}


def answerable(gold: Sequence[Sequence[str]]) -> list[int]:
    """Positions of the questions the span scores are over."""
    return [position for position, answers in enumerate(gold) if has_answer(answers)]
