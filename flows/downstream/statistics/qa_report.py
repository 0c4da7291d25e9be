"""Question answering's figures side by side: exact match, F1, SQuAD 2.0's HasAns F1 and NoAns
accuracy, and the span skill, for each arm and each baseline.

One headline metric hides how a SQuAD 2.0 score is made: answering nothing scores the share of
unanswerable questions, so a model's overall F1 reads only beside its HasAns F1 (does it find
answers?) and its NoAns accuracy (does it abstain?), beside the `no_answer` baseline, beside the
null-score threshold each run fitted on validation (-inf, shown as "abstains everywhere", where
answering nothing was best there), and beside the span skill: EM and F1 on the answerable
questions with abstention off, the encoder's skill at finding answers whatever the threshold,
with the lift's two intervals (finetuning/qa_runs.py).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from flows.core.tables import markdown_table
from flows.downstream.statistics.report import interval_text, std
from flows.downstream.tasks.qa_decoding import ABSTAINS, abstains_everywhere

if TYPE_CHECKING:
    from flows.downstream.finetuning.results import ArmResult, BaselineResult

QA_COLUMNS = (
    "exact_match",
    "f1",
    "has_ans_f1",
    "no_ans_accuracy",
    "span_exact_match",
    "span_f1",
    "null_threshold",
)
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
    """Over the runs that fitted a threshold (SQuAD 2.0): `<task>.<arm>_abstaining_runs`, those
    whose threshold abstains everywhere, and `<task>.<arm>_null_threshold_mean|_std` over the
    others (MLflow holds no -inf); and `<task>.baseline_<name>_<score>_mean|_std` of every
    score, not the task's metric alone."""
    outputs: dict[str, float] = {}
    for arm, arm_result in arms.items():
        thresholds = [r.null_threshold for r in arm_result.runs if r.null_threshold is not None]
        if not thresholds:
            continue
        finite = [t for t in thresholds if not abstains_everywhere(t)]
        outputs[f"{task}.{arm}_abstaining_runs"] = len(thresholds) - len(finite)
        if finite:
            outputs[f"{task}.{arm}_null_threshold_mean"] = statistics.fmean(finite)
            outputs[f"{task}.{arm}_null_threshold_std"] = std(finite)
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
            threshold_cell(outputs, prefix, outputs[f"{task}.seeds"])
            if c == "null_threshold"
            else mean_std(outputs, f"{prefix}{c}")
            if f"{prefix}{c}_mean" in outputs
            else "n/a"  # a baseline has no span skill
            for c in columns
        ]
        rows.append((label, cells))
    return rows


def mean_std(outputs: dict[str, Any], key: str) -> str:
    """`0.512 ± 0.100`: `<key>_mean` and `<key>_std`."""
    return f"{outputs[f'{key}_mean']:.3f} ± {outputs[f'{key}_std']:.3f}"


def threshold_cell(outputs: dict[str, Any], prefix: str, seeds: int) -> str:
    """`0.512 ± 0.100`, `abstains everywhere`, or both (`(1 of 3 runs abstain everywhere)`);
    `n/a` for a row that fits no threshold (a baseline)."""
    abstaining = outputs.get(f"{prefix}abstaining_runs")
    if abstaining is None:
        return "n/a"
    if abstaining >= seeds:
        return ABSTAINS
    cell = mean_std(outputs, f"{prefix}null_threshold")
    return cell + (f" ({abstaining} of {seeds} runs abstain everywhere)" if abstaining else "")


def qa_columns_present(outputs: dict[str, Any], task: str) -> list[str]:
    return [
        c
        for c in QA_COLUMNS
        if f"{task}.pretrained_{c}_mean" in outputs
        or (c == "null_threshold" and f"{task}.pretrained_abstaining_runs" in outputs)
    ]


def qa_markdown(outputs: dict[str, Any], task: str) -> str:
    """summary.md's table for a question-answering task (test split, mean ± std over seeds)."""
    columns = qa_columns_present(outputs, task)
    intro = (
        f"Question answering, {task} (test; mean ± std over seeds; SQuAD's official EM/F1 as "
        "fractions):"
    )
    rows = [[label, *cells] for label, cells in qa_rows(outputs, task)]
    return f"{intro}\n\n" + markdown_table(["", *columns], rows)


def qa_summary_lines(outputs: dict[str, Any], task: str, evaluated: bool = False) -> list[str]:
    """The run summary's lines for a question-answering task: the span skill with its lift,
    then every score of each row. `evaluated`: `cloze evaluate`'s, whose pretrained arm is the
    checkpoint as it is."""
    if f"{task}.pretrained_exact_match_mean" not in outputs:
        return []
    columns = qa_columns_present(outputs, task)
    return [
        *span_lines(outputs, task, evaluated),
        f"  {' / '.join(columns)}:",
        *(
            f"    {'base' if evaluated and label == 'pretrained' else label}: {' / '.join(cells)}"
            for label, cells in qa_rows(outputs, task)
        ),
    ]


def span_lines(outputs: dict[str, Any], task: str, evaluated: bool) -> list[str]:
    """`span skill (answerable test questions, ...): base 0.305 ± 0.020, random init ...; lift`
    and its two intervals; adapted over base where a base arm ran."""
    metric = f"span_{outputs[f'{task}.metric']}"
    if f"{task}.pretrained_{metric}_mean" not in outputs:
        return []  # no answerable test question

    def arm(name: str) -> str:
        return mean_std(outputs, f"{task}.{name}_{metric}")

    def intervals(name: str) -> str:
        prefix = f"{task}.{name}_{metric}"
        t = (outputs.get(f"{prefix}_ci_low"), outputs.get(f"{prefix}_ci_high"))
        boot = (outputs.get(f"{prefix}_bootstrap_low"), outputs.get(f"{prefix}_bootstrap_high"))
        return (
            f"{outputs[prefix]:+.3f}; {outputs.get('confidence', 0.95):.0%} CI paired t over seeds "
            f"{interval_text(t)}, bootstrap over test questions {interval_text(boot)}"
        )

    first = "base" if evaluated else "pretrained"
    lines = [
        f"  span skill ({metric}: answerable test questions, best span always given): {first} "
        f"{arm('pretrained')}, random init {arm('random_init')}; "
        f"{'base over random init' if evaluated else 'lift'} {intervals('lift')}"
    ]
    if f"{task}.base_{metric}_mean" in outputs:
        lines.append(
            f"    base checkpoint {arm('base')}; adapted over base {intervals('over_base')}"
        )
    return lines
