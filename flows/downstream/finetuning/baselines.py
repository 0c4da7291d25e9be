"""Baselines without an encoder: what the lift has to beat to be worth a GPU.

Each kind has its own (spec.py `BASELINES`), fitted by the kind (flows/downstream/kinds/):
classification's and relation's `majority` and `tfidf_logreg`, token classification's
`seen_entities`, question answering's `no_answer` and `lexical_overlap`. Each is fitted on the same
labelled examples the arms train on (one fit per seed's sample in limited-label mode) and scored
with the arms' metric code; test never steers a choice.
"""

from __future__ import annotations

from typing import Any

from flows.downstream.finetuning.results import BaselineResult
from flows.downstream.kinds.registry import kind_of
from flows.downstream.tasks.readers import LabelSetExample, TaggedSentence
from flows.downstream.tasks.spec import TaskSpec
from flows.downstream.tasks.squad import QAExample


def gold_of(example: Any) -> Any:
    """What an example is scored against: tags, reference answers, label ids, or a label id."""
    if isinstance(example, TaggedSentence):
        return list(example.tags)
    if isinstance(example, LabelSetExample):
        return list(example.labels)
    return list(example.answers) if isinstance(example, QAExample) else example.label


def evaluate_baselines(
    spec: TaskSpec,
    names: tuple[str, ...],
    labels: list[str],
    splits: dict[str, list[Any]],
    train_samples: list[list[Any]],
) -> dict[str, BaselineResult]:
    """Every baseline of the task, fitted once per train sample (the arms' labelled examples)."""
    kind = kind_of(spec.kind)
    test_gold: list[Any] = [gold_of(example) for example in splits["test"]]
    results = {name: BaselineResult(name) for name in names}
    for train in train_samples:
        for name, result in results.items():
            split_set = {**splits, "train": train}
            predictions, choices = kind.fit_baseline(name, spec, labels, split_set)
            scores = kind.score(test_gold, predictions, labels, spec.negative_label)
            result.test.append(scores)
            result.choices.append(choices)
    return results
