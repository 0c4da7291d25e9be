"""Precision, recall, F1 and support per class (or per entity type), for results.json.

One macro or micro figure hides which classes a model gets wrong; an imbalanced 13-class task
is only readable class by class. What a class is, is the task kind's (flows/downstream/kinds/,
`per_class`: a label, an entity type, a relation type, HasAns/NoAns); the figures of one class
are these. A class with no test example has support 0 and no recall (`None`): the report says it
was never tested instead of scoring it 0.
"""

from __future__ import annotations

from typing import Any

from flows.core.tables import markdown_table

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
