"""Question answering's figures side by side: exact match, F1, and SQuAD 2.0's HasAns F1 and
NoAns accuracy, for each arm and each baseline.

One headline metric hides how a SQuAD 2.0 score is made: answering nothing scores the share of
unanswerable questions, so a model's overall F1 reads only beside its HasAns F1 (does it find
answers?) and its NoAns accuracy (does it abstain?), beside the `no_answer` baseline, and beside
the null-score threshold each run fitted on validation (a threshold below every margin abstains
on every question).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from flows.core.tables import markdown_table
from flows.downstream.statistics.report import std

if TYPE_CHECKING:
    from flows.downstream.finetuning.baselines import BaselineResult
    from flows.downstream.finetuning.recipe import ArmResult

QA_COLUMNS = ("exact_match", "f1", "has_ans_f1", "no_ans_accuracy", "null_threshold")
# The arms a run may have (flows/downstream/tasks/spec.py), as the table names them.
ROWS = {
    "pretrained": "pretrained",
    "random_init": "random init",
    "base": "base checkpoint",
    "student": "student",
}


def qa_outputs(
    task: str, arms: dict[str, ArmResult], baselines: dict[str, BaselineResult]
) -> dict[str, float]:
    """`<task>.<arm>_null_threshold_mean|_std` over the runs that fitted one (SQuAD 2.0), and
    `<task>.baseline_<name>_<score>_mean|_std` of every score, not the task's metric alone."""
    outputs = {}
    for arm, arm_result in arms.items():
        thresholds = [r.null_threshold for r in arm_result.runs if r.null_threshold is not None]
        if thresholds:
            outputs[f"{task}.{arm}_null_threshold_mean"] = statistics.fmean(thresholds)
            outputs[f"{task}.{arm}_null_threshold_std"] = std(thresholds)
    for name, result in baselines.items():
        for score in result.test[0]:
            values = [test[score] for test in result.test]
            outputs[f"{task}.baseline_{name}_{score}_mean"] = statistics.fmean(values)
            outputs[f"{task}.baseline_{name}_{score}_std"] = std(values)
    return outputs


def qa_rows(outputs: dict[str, Any], task: str) -> list[tuple[str, list[str]]]:
    """(row name, a `mean ± std` cell per column present) for each arm and baseline reported."""
    columns = qa_columns_present(outputs, task)
    names = [(label, f"{task}.{arm}_") for arm, label in ROWS.items()]
    names += [
        (f"baseline: {name}", f"{task}.baseline_{name}_")
        for name in filter(None, str(outputs.get(f"{task}.baselines", "")).split(","))
    ]
    rows = []
    for label, prefix in names:
        if f"{prefix}{columns[0]}_mean" not in outputs:
            continue
        cells = [
            f"{outputs[f'{prefix}{c}_mean']:.3f} ± {outputs[f'{prefix}{c}_std']:.3f}"
            if f"{prefix}{c}_mean" in outputs
            else "n/a"  # a baseline fits no null-score threshold
            for c in columns
        ]
        rows.append((label, cells))
    return rows


def qa_columns_present(outputs: dict[str, Any], task: str) -> list[str]:
    return [c for c in QA_COLUMNS if f"{task}.pretrained_{c}_mean" in outputs]


def qa_markdown(outputs: dict[str, Any], task: str) -> str:
    """summary.md's table for a question-answering task (test split, mean ± std over seeds)."""
    columns = qa_columns_present(outputs, task)
    intro = (
        f"Question answering, {task} (test; mean ± std over seeds; SQuAD's official EM/F1 as "
        "fractions):"
    )
    rows = [[label, *cells] for label, cells in qa_rows(outputs, task)]
    return f"{intro}\n\n" + markdown_table(["", *columns], rows)


def qa_summary_lines(outputs: dict[str, Any], task: str) -> list[str]:
    """The run summary's lines for a question-answering task: every score of each row."""
    if f"{task}.pretrained_exact_match_mean" not in outputs:
        return []
    columns = qa_columns_present(outputs, task)
    return [f"  {' / '.join(columns)}:"] + [
        f"    {label}: {' / '.join(cells)}" for label, cells in qa_rows(outputs, task)
    ]
