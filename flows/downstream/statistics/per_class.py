"""Precision, recall, F1 and support per class (or per entity type), for results.json.

One macro or micro figure hides which classes a model gets wrong; an imbalanced 13-class task
is only readable class by class. A relation task is reported per relation type, direction-aware,
as its F1s count (lightning_modules/metrics.py `relation_counts`). A class with no test example
has support 0 and no recall (`None`): the report says it was never tested instead of scoring it 0.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from flows.core.tables import markdown_table
from lightning_modules.label_metrics import entity_spans, relation_counts, relation_type
from lightning_modules.squad_metrics import example_scores, has_answer

Report = dict[str, dict[str, float | int | None]]


def class_scores(true_positive: int, predicted: int, support: int) -> dict[str, float | int | None]:
    """F1 as 2TP / (predicted + support): 0 for a class predicted but never right, or never
    predicted though present; undefined only for a class neither present nor predicted."""
    total = predicted + support
    return {
        "precision": true_positive / predicted if predicted else None,
        "recall": true_positive / support if support else None,
        "f1": 2 * true_positive / total if total else None,
        "support": support,
    }


def per_class(kind: str, gold: list[Any], predictions: list[Any], labels: list[str]) -> Report:
    """Label name (classification), entity type (token classification), relation type
    (relation) or HasAns/NoAns (question answering) -> its scores."""
    if kind == "question_answering":
        return answer_groups(gold, predictions)
    if kind == "relation":
        counts = relation_counts([labels[g] for g in gold], [labels[p] for p in predictions])
        return {name: class_scores(*counts.get(name, (0, 0, 0))) for name in relation_names(labels)}
    hits: Counter[str] = Counter()
    predicted: Counter[str] = Counter()
    support: Counter[str] = Counter()
    if kind == "token_classification":
        for truth, guess in zip(gold, predictions, strict=True):
            gold_spans = entity_spans([labels[tag] for tag in truth])
            guessed = [labels[tag] for tag in guess] + ["O"] * (len(truth) - len(guess))
            predicted_spans = entity_spans(guessed)
            support.update(span[0] for span in gold_spans)
            predicted.update(span[0] for span in predicted_spans)
            hits.update(span[0] for span in gold_spans & predicted_spans)
        names = sorted({label.partition("-")[2] for label in labels if label != "O"})
    else:
        for truth, guess in zip(gold, predictions, strict=True):
            support[labels[truth]] += 1
            predicted[labels[guess]] += 1
            hits[labels[truth]] += int(truth == guess)
        names = list(labels)
    return {name: class_scores(hits[name], predicted[name], support[name]) for name in names}


def answer_groups(gold: list[Any], predictions: list[Any]) -> Report:
    """A question-answering task's classes: SQuAD 2.0's HasAns and NoAns questions, each with
    its mean F1 (no precision or recall: an answer is scored against references, not a class)."""
    groups: dict[str, list[float]] = {"HasAns": [], "NoAns": []}
    for answers, predicted in zip(gold, predictions, strict=True):
        groups["HasAns" if has_answer(answers) else "NoAns"].append(
            example_scores(answers, predicted)[1]
        )
    return {
        name: {
            "precision": None,
            "recall": None,
            "f1": sum(scores) / len(scores) if scores else None,
            "support": len(scores),
        }
        for name, scores in groups.items()
    }


def relation_names(labels: list[str]) -> list[str]:
    """A label list's relation types, in its order (`Cause-Effect(e1,e2)` -> `Cause-Effect`)."""
    return list(dict.fromkeys(relation_type(label) for label in labels))


def mean_report(reports: list[Report]) -> Report:
    """Each score's mean over seeds (support is the test split's, the same for every seed)."""
    merged: Report = {}
    for name in reports[0]:
        scores: dict[str, float | int | None] = {}
        for metric in ("precision", "recall", "f1"):
            values = [report[name][metric] for report in reports]
            known = [float(value) for value in values if value is not None]
            scores[metric] = sum(known) / len(known) if known else None
        scores["support"] = reports[0][name]["support"]
        merged[name] = scores
    return merged


PER_CLASS_COLUMNS = ("arm", "class", "precision", "recall", "f1", "support")


def per_class_table(task_record: dict[str, Any], arms: tuple[str, ...]) -> dict[str, list[Any]]:
    """A task's per-class reports of results.json as one table, a column per key and a row per
    arm and class: the shape of an MLflow table artifact (`log_table`)."""
    table: dict[str, list[Any]] = {column: [] for column in PER_CLASS_COLUMNS}
    for arm in arms:
        for name, scores in task_record[arm]["per_class"].items():
            row = {"arm": arm, "class": name, **scores}
            for column in PER_CLASS_COLUMNS:
                table[column].append(row[column])
    return table


def per_class_markdown(task: str, record: dict[str, Any], arms: list[str]) -> str:
    """A task's per-class precision / recall / F1 of each arm (means over seeds), as markdown:
    summary.md shows it for relation tasks, whose macro-F1 averages these rows."""
    names = list(record[arms[0]]["per_class"])

    def cell(scores: dict[str, Any]) -> str:
        return " / ".join(
            "-" if scores[m] is None else f"{scores[m]:.3f}" for m in ("precision", "recall", "f1")
        )

    rows = [
        [
            name,
            record[arms[0]]["per_class"][name]["support"],
            *(cell(record[arm]["per_class"][name]) for arm in arms),
        ]
        for name in names
    ]
    header = ["class", "test support", *(f"{arm} P / R / F1" for arm in arms)]
    return f"Per class, {task} (mean over seeds):\n\n" + markdown_table(header, rows)
