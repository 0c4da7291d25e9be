"""Extractive question answering's metrics, exact match and F1, as the official SQuAD v2.0
evaluation script (`evaluate-v2.0.py`) computes them.

Answers are compared after the script's normalisation (lowercase; punctuation, the articles
a/an/the and extra whitespace removed); each question takes the maximum over its reference
answers; an unanswerable question's only reference is the empty string, so it scores 1 exactly
when the prediction is empty too. Scores here are fractions (the script prints them x100).
Plain Python: a task's files are checked before torch loads.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from statistics import fmean

ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
PUNCTUATION = frozenset(string.punctuation)
# Every score a QA split gets; the HasAns/NoAns parts only where the split holds such questions.
QA_METRICS = ("exact_match", "f1")


def normalize_answer(text: str) -> str:
    """The script's normalisation, in its order: lower, punctuation, articles, whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def exact(gold: str, predicted: str) -> float:
    return float(normalize_answer(gold) == normalize_answer(predicted))


def token_f1(gold: str, predicted: str) -> float:
    """Bag-of-words F1 of the normalised answers; an empty side scores 1 only against empty."""
    gold_tokens = normalize_answer(gold).split() if gold else []
    predicted_tokens = normalize_answer(predicted).split() if predicted else []
    if not gold_tokens or not predicted_tokens:
        return float(gold_tokens == predicted_tokens)
    same = sum((Counter(gold_tokens) & Counter(predicted_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def references(answers: Sequence[str]) -> list[str]:
    """The references scored against: those that normalise to something, else the empty answer
    (as the script does, an answer list of blanks counts as no answer)."""
    kept = [answer for answer in answers if normalize_answer(answer)]
    return kept or [""]


def example_scores(answers: Sequence[str], predicted: str) -> tuple[float, float]:
    """(exact match, F1) of one question: the maximum over its references."""
    golds = references(answers)
    return max(exact(g, predicted) for g in golds), max(token_f1(g, predicted) for g in golds)


def squad_scores(gold: Sequence[Sequence[str]], predictions: Sequence[str]) -> dict[str, float]:
    """`exact_match` and `f1` over every question, then `has_ans_*` over the answerable ones
    and `no_ans_accuracy` (its EM and F1 are equal) over the unanswerable ones, where present."""
    pairs = [example_scores(a, p) for a, p in zip(gold, predictions, strict=True)]
    if not pairs:
        return {"exact_match": 0.0, "f1": 0.0}
    scores = {"exact_match": fmean(e for e, _ in pairs), "f1": fmean(f for _, f in pairs)}
    answerable = [pair for answers, pair in zip(gold, pairs, strict=True) if has_answer(answers)]
    if answerable:
        scores["has_ans_exact_match"] = fmean(e for e, _ in answerable)
        scores["has_ans_f1"] = fmean(f for _, f in answerable)
    if len(answerable) < len(pairs):
        unanswerable = [
            e for answers, (e, _) in zip(gold, pairs, strict=True) if not has_answer(answers)
        ]
        scores["no_ans_accuracy"] = fmean(unanswerable)
    return scores


def has_answer(answers: Sequence[str]) -> bool:
    """As the script splits HasAns from NoAns: by whether the question lists any answer."""
    return bool(answers)
