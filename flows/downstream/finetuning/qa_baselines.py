"""Question answering's baselines without an encoder, beside the arms as majority and TF-IDF
are beside a classifier's.

- `no_answer`: every question is unanswerable. On SQuAD 2.0 it scores the share of unanswerable
  questions (about half of dev): a model that does not beat it has learnt nothing it shows.
- `lexical_overlap`: the context sentence sharing the most distinct (normalised) words with the
  question, a sliding-window reader's classic baseline (Richardson et al. 2013; the SQuAD paper's
  sentence-level baseline). On a task with unanswerable questions it answers nothing below an
  overlap chosen on the validation split, as the arms' null threshold is.
"""

from __future__ import annotations

import re
from typing import Any

from flows.downstream.tasks.squad import QAExample
from lightning_modules.squad_metrics import normalize_answer, squad_scores

SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def no_answer(test: list[QAExample]) -> list[str]:
    return [""] * len(test)


def best_sentence(example: QAExample) -> tuple[str, int]:
    """The context sentence with the most question words, and that overlap (ties: the first)."""
    words = set(normalize_answer(example.question).split())
    best, overlap = "", -1
    for sentence in SENTENCE_END.split(example.context):
        shared = len(words & set(normalize_answer(sentence).split()))
        if shared > overlap:
            best, overlap = sentence.strip(), shared
    return best, overlap


def lexical_overlap(
    train: list[QAExample], validation: list[QAExample], test: list[QAExample], metric: str
) -> tuple[list[str], dict[str, float]]:
    """Test answers, and the least overlap that answers (chosen on validation; 0 answers all,
    and is the only choice when train has no unanswerable question)."""
    unanswerable = any(not example.answers for example in train)
    found = [best_sentence(example) for example in validation]
    gold = [list(example.answers) for example in validation]
    least = 0
    if unanswerable:
        levels = sorted({overlap for _, overlap in found} | {0})
        scores = [
            squad_scores(gold, [text if o >= level else "" for text, o in found])[metric]
            for level in levels
        ]
        least = levels[scores.index(max(scores))]
    answers = [text if overlap >= least else "" for text, overlap in map(best_sentence, test)]
    return answers, {"min_overlap": float(least)}


def fit_qa_baseline(
    name: str, metric: str, splits: dict[str, list[Any]]
) -> tuple[list[str], dict[str, float]]:
    if name == "no_answer":
        return no_answer(splits["test"]), {}
    return lexical_overlap(splits["train"], splits["validation"], splits["test"], metric)
