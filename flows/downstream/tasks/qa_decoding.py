"""Start and end logits of each window back to an answer per question, as run_qa.py decodes.

Per window, the `N_BEST` highest start and end positions pair into spans inside the context, end
not before start, at most `MAX_ANSWER_TOKENS` long; a question's answer is its best-scoring span
(start + end logit) over all its windows. Its null score is the lowest [CLS] score (start + end at
position 0) over its windows. For SQuAD 2.0 a question is answered with nothing when its null
score beats its best span by more than a threshold, chosen on the validation split (the best
F1 there, as the official script's `best_f1` does) and then applied to test unchanged. Where
answering nothing is best on validation, the threshold is -inf: test abstains on every question
too, rather than answering the test questions whose margin falls below validation's lowest (a
cut that fits nothing and answered between 6% and 94% of the unanswerable test questions in the
run of 2026-12-05).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flows.downstream.tasks.qa_encoding import QAEncodedSplit, span_text
from lightning_modules.squad_metrics import QA_METRICS, example_scores

N_BEST = 20
MAX_ANSWER_TOKENS = 30
WindowLogits = tuple[Sequence[float], Sequence[float]]  # (start, end) over a window's tokens


@dataclass(frozen=True)
class Candidate:
    """A question's best span (`text`, `score`) and its null score; no valid span: empty text,
    score -inf."""

    text: str
    score: float
    null_score: float

    @property
    def margin(self) -> float:
        """How much the null answer beats the best span by."""
        return self.null_score - self.score


def window_spans(
    start: np.ndarray, end: np.ndarray, offsets: list[tuple[int, int] | None]
) -> list[tuple[float, int, int]]:
    """(score, start token, end token) of the window's valid spans among the n-best."""
    starts = np.argsort(start)[::-1][:N_BEST]
    ends = np.argsort(end)[::-1][:N_BEST]
    spans = []
    for first in starts.tolist():
        for last in ends.tolist():
            if offsets[first] is None or offsets[last] is None:
                continue
            if last < first or last - first + 1 > MAX_ANSWER_TOKENS:
                continue
            spans.append((float(start[first] + end[last]), first, last))
    return spans


def candidates(split: QAEncodedSplit, logits: list[WindowLogits]) -> list[Candidate]:
    """Each question's best span over its windows, and its null score."""
    best: list[tuple[float, str]] = [(-math.inf, "")] * len(split.examples)
    null = [math.inf] * len(split.examples)
    for window, (start_logits, end_logits) in enumerate(logits):
        question = split.window_example[window]
        start, end = np.asarray(start_logits), np.asarray(end_logits)
        null[question] = min(null[question], float(start[0] + end[0]))
        offsets = split.offsets[window]
        context = split.examples[question].context
        for score, first, last in window_spans(start, end, offsets):
            if score > best[question][0]:
                best[question] = (score, span_text(context, offsets, first, last))
    return [
        Candidate(text, score, null_score)
        for (score, text), null_score in zip(best, null, strict=True)
    ]


def fit_threshold(gold: list[list[str]], found: list[Candidate], metric: str) -> float:
    """The margin above which to answer nothing that scores best on these questions (ties: the
    lowest such threshold); -inf (abstain on every question) when answering nothing scores best.

    The candidates are each finite margin (the highest answers every question that has a span)
    and abstaining everywhere, where the official script's `best_f1` starts. A question without
    a valid span (margin +inf) is answered with nothing whatever the threshold."""
    column = QA_METRICS.index(metric)
    answered = np.array(
        [example_scores(a, c.text)[column] for a, c in zip(gold, found, strict=True)]
    )
    empty = np.array([example_scores(a, "")[column] for a in gold])
    margins = np.array([c.margin for c in found])
    finite = margins[np.isfinite(margins)]
    if not finite.size:
        return 0.0  # no span anywhere: every threshold gives the same (empty) answers
    thresholds = np.append(-math.inf, np.unique(finite))
    totals = [np.where(margins > t, empty, answered).sum() for t in thresholds]
    return float(thresholds[int(np.argmax(totals))])


ABSTAINS = "abstains everywhere"  # how a -inf threshold is shown


def abstains_everywhere(threshold: float | None) -> bool:
    return threshold is not None and threshold == -math.inf


def answers(found: list[Candidate], threshold: float | None) -> list[str]:
    """Each question's answer; with a threshold (SQuAD 2.0) nothing where the null score wins by
    more than it."""
    if threshold is None:
        return [candidate.text for candidate in found]
    return ["" if candidate.margin > threshold else candidate.text for candidate in found]
