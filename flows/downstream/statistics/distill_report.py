"""The distilled student beside its teacher and random init: one table, one run.

The student's lift (student minus random init, paired by seed) is read against the teacher's
(pretrained minus random init): their ratio is the student's share of the teacher's lift, the
figure DistilBERT reports as "retains 97% of BERT", with Fieller's interval over seeds (none when
the teacher's own lift is not told from zero: then the share means nothing). The student minus the
teacher gets a paired t-interval over seeds. Sizes and inference throughput are measured in the
same run (flows/downstream/statistics/speed.py), so their ratios hold on the machine that made them.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from flows.core.tables import markdown_table
from flows.downstream.statistics.report import paired_figures, ratio_interval, std
from flows.downstream.tasks.spec import STUDENT_ARM

if TYPE_CHECKING:
    from flows.downstream.finetuning.results import ArmResult

SIZE_KEYS = (
    "teacher_parameters",
    "student_parameters",
    "teacher_tokens_per_second",
    "student_tokens_per_second",
)


def student_outputs(task: str, arms: dict[str, ArmResult], confidence: float) -> dict[str, Any]:
    """`<task>.student_*` figures: its scores, its lift, its share of the teacher's lift."""
    student = arms[STUDENT_ARM]
    outputs: dict[str, Any] = {
        f"{task}.student_learning_rate": student.learning_rate,
        f"{task}.student_epochs_mean": statistics.fmean(r.best_epoch for r in student.runs),
        f"{task}.student_capped_runs": sum(r.capped for r in student.runs),
    }
    for name in student.runs[0].test:
        scores = {arm: [run.test[name] for run in result.runs] for arm, result in arms.items()}
        outputs[f"{task}.student_{name}_mean"] = statistics.fmean(scores[STUDENT_ARM])
        outputs[f"{task}.student_{name}_std"] = std(scores[STUDENT_ARM])
        pairs = zip(scores[STUDENT_ARM], scores["random_init"], scores["pretrained"], strict=True)
        lifts, gaps, teacher_lifts = [], [], []
        for mine, floor, teacher in pairs:
            lifts.append(mine - floor)
            gaps.append(mine - teacher)
            teacher_lifts.append(teacher - floor)
        lift, teacher_lift = statistics.fmean(lifts), statistics.fmean(teacher_lifts)
        outputs[f"{task}.student_lift_{name}"] = lift
        if teacher_lift:  # no share of nothing: the key is absent when the teacher had no lift
            outputs[f"{task}.student_share_of_lift_{name}"] = lift / teacher_lift
        interval = ratio_interval(lifts, teacher_lifts, confidence)
        if interval is not None:  # absent when the teacher's lift is not told from zero
            share_key = f"{task}.student_share_of_lift_{name}"
            outputs[f"{share_key}_ci_low"], outputs[f"{share_key}_ci_high"] = interval
        outputs |= paired_figures(gaps, confidence, f"{task}.student_minus_teacher_{name}")
    return outputs


def size_outputs(parameters: dict[str, int], tokens_per_second: dict[str, float]) -> dict[str, Any]:
    """`distill.*`: encoder parameters and inference tokens/s of teacher and student, and ratios."""
    return {
        "distill.teacher_parameters": parameters["teacher"],
        "distill.student_parameters": parameters["student"],
        "distill.parameter_ratio": parameters["student"] / parameters["teacher"],
        "distill.teacher_tokens_per_second": tokens_per_second["teacher"],
        "distill.student_tokens_per_second": tokens_per_second["student"],
        "distill.speedup": tokens_per_second["student"] / tokens_per_second["teacher"],
    }


def share_text(outputs: dict[str, Any], task: str, metric: str, confidence: float) -> str:
    """The student's share of the teacher's lift with its interval, or why there is none."""
    key = f"{task}.student_share_of_lift_{metric}"
    if key not in outputs:
        return "n/a (no teacher lift)"
    if f"{key}_ci_low" in outputs:
        return (
            f"{outputs[key]:.0%} [{outputs[f'{key}_ci_low']:.0%}, {outputs[f'{key}_ci_high']:.0%}"
            f", {confidence:.0%} Fieller]"
        )
    if outputs.get(f"{task}.lift_{metric}_ci_low") is None:
        return f"{outputs[key]:.0%} (one seed: no interval)"
    return f"{outputs[key]:.0%} (no interval: the teacher's lift is not told from zero)"


def score(outputs: dict[str, Any], task: str, arm: str) -> str:
    """`mean ± std` of an arm's configured metric."""
    metric = outputs[f"{task}.metric"]
    mean, spread = outputs[f"{task}.{arm}_{metric}_mean"], outputs[f"{task}.{arm}_{metric}_std"]
    return f"{mean:.3f} ± {spread:.3f}"


def distillation_row(outputs: dict[str, Any], task: str, confidence: float) -> list[str]:
    """A task's cells in the distillation table, in `distillation_table`'s column order."""
    metric = outputs[f"{task}.metric"]
    low = outputs.get(f"{task}.student_minus_teacher_{metric}_ci_low")
    high = outputs.get(f"{task}.student_minus_teacher_{metric}_ci_high")
    return [
        task,
        metric,
        score(outputs, task, "pretrained"),
        score(outputs, task, STUDENT_ARM),
        score(outputs, task, "random_init"),
        f"{outputs[f'{task}.lift_{metric}']:+.3f}",
        f"{outputs[f'{task}.student_lift_{metric}']:+.3f}",
        share_text(outputs, task, metric, confidence),
        f"{outputs[f'{task}.student_minus_teacher_{metric}']:+.3f}",
        "none (one seed)" if low is None else f"[{low:+.3f}, {high:+.3f}]",
    ]


def distillation_table(outputs: dict[str, Any], tasks: list[str], confidence: float) -> str:
    """Teacher, student and random init per task, then sizes and throughput."""
    level = f"{confidence:.0%}"
    header = [
        "task",
        "metric",
        "teacher",
        "student",
        "random init",
        "teacher lift",
        "student lift",
        "student's share of the lift",
        "student - teacher",
        f"{level} CI, paired t (seeds)",
    ]
    table = [distillation_row(outputs, task, confidence) for task in tasks]
    rows = [
        markdown_table(header, table),
        "",
        f"Encoder parameters: teacher {outputs['distill.teacher_parameters']:,}, student "
        f"{outputs['distill.student_parameters']:,} ({outputs['distill.parameter_ratio']:.0%}). "
        f"Inference: teacher {outputs['distill.teacher_tokens_per_second']:,.0f} tokens/s, student "
        f"{outputs['distill.student_tokens_per_second']:,.0f} tokens/s "
        f"({outputs['distill.speedup']:.2f}x), measured in this run, side by side "
        f"(batch {outputs['distill.speed_batch_size']} x {outputs['distill.speed_seq_len']} "
        "tokens, median of interleaved rounds).",
    ]
    return "\n".join(rows)
