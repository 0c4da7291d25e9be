"""What every evaluation of a task reports of its arms: each arm's mean and std, the lift with its
paired-t interval over seeds and its paired bootstrap interval over test examples (a QA task's
span skill's too), and the task's entry of results.json. The finetune stage, `cloze evaluate`'s
stage and each lift-curve point report the same figures from the same code.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flows.downstream.finetuning.qa_runs import SPAN, answerable
from flows.downstream.finetuning.recipe import TaskRun
from flows.downstream.finetuning.results import ArmResult, BaselineResult, RunResult
from flows.downstream.settings import FinetuneSettings
from flows.downstream.statistics.bootstrap import bootstrap_lift
from flows.downstream.statistics.per_class import mean_report
from flows.downstream.statistics.report import task_outputs


def lift_figures(
    task_run: TaskRun, arms: dict[str, ArmResult], settings: FinetuneSettings, seed: int
) -> dict[str, Any]:
    """What every evaluation of a task reports, the stage's and each lift-curve point's: each
    arm's mean and std, the lift with its paired-t interval, and its bootstrap interval (a QA
    task's span skill's too)."""
    spec, epochs = task_run.spec, task_run.settings.epochs
    # An arm from a public checkpoint (a base arm beside it) has its own epoch limit.
    pretrained_limit = None if task_run.base_dir is None else task_run.grid("pretrained")[1]
    return {
        **task_outputs(spec.name, spec.metric, arms, settings.confidence, epochs, pretrained_limit),
        **bootstrap_outputs(task_run, arms, settings, seed),
        **span_bootstrap(task_run, arms, settings, seed),
    }


def span_bootstrap(
    task_run: TaskRun,
    arms: dict[str, ArmResult],
    settings: FinetuneSettings,
    seed: int,
    pair: tuple[str, str] = ("pretrained", "random_init"),
    name: str = "lift",
) -> dict[str, float]:
    """A QA task's span skill (`<task>.<name>_span_<metric>_bootstrap_*`): the bootstrap over
    its answerable test questions; nothing for another kind."""
    if not task_run.question_answering:
        return {}
    return bootstrap_outputs(task_run, arms, settings, seed, pair, name, span=True)


def bootstrap_outputs(
    task_run: TaskRun,
    arms: dict[str, ArmResult],
    settings: FinetuneSettings,
    seed: int,
    pair: tuple[str, str] = ("pretrained", "random_init"),
    name: str = "lift",
    span: bool = False,
) -> dict[str, float]:
    """`<task>.<name>_<metric>_bootstrap_low|high`: the paired bootstrap over test examples of
    the first arm of `pair` minus the second (the lift; `over_base` for a continued checkpoint).
    `span`: a QA task's span skill, over its answerable test questions and their best spans."""
    spec, gold = task_run.spec, task_run.splits["test"].gold
    kept = answerable(gold) if span else list(range(len(gold)))
    if not kept:
        return {}

    def predicted(run: RunResult) -> list[Any]:
        return [(run.test_spans or [])[i] for i in kept] if span else run.test_predictions

    kind, labels = task_run.kind, task_run.labels
    statistics = {
        arm: [
            kind.example_statistics([gold[i] for i in kept], predicted(run), labels)
            for run in arms[arm].runs
        ]
        for arm in pair
    }
    low, high = bootstrap_lift(
        statistics[pair[0]],
        statistics[pair[1]],
        lambda totals: kind.bootstrap_metric(spec.metric, totals, labels, spec.negative_label),
        settings.bootstrap_samples,
        settings.confidence,
        seed,
    )
    prefix = f"{spec.name}.{name}_{SPAN if span else ''}{spec.metric}_bootstrap"
    return {f"{prefix}_low": low, f"{prefix}_high": high}


def task_record(
    task_run: TaskRun, arms: dict[str, ArmResult], baselines: dict[str, BaselineResult]
) -> dict[str, Any]:
    """A task's entry of results.json: every run (without its raw predictions), each arm's
    per-class test scores (mean over seeds), every baseline."""
    gold = task_run.splits["test"].gold
    record: dict[str, Any] = {}
    for arm, result in arms.items():
        record[arm] = asdict(result)
        for run in record[arm]["runs"]:
            del run["test_predictions"]
        record[arm]["per_class"] = mean_report(
            [
                task_run.kind.per_class(gold, run.test_predictions, task_run.labels)
                for run in result.runs
            ]
        )
    record["baselines"] = {name: asdict(result) for name, result in baselines.items()}
    return record
