"""Where the evaluation shows up: a child run per task, the summary table, the chart.

The stage writes `summary.md` and `lift.png` into its artifact, so a cache hit publishes the same
table and chart as the run that computed them.
"""

from __future__ import annotations

import json
from typing import Any

from flows.core.artifacts import ArtifactRef
from flows.tracking.runs import RunHandle, Tracker, final_status

# Each task run's per-class precision, recall, F1 and support, per arm (mean over seeds).
PER_CLASS_FILE = "per_class.json"


class TaskRuns:
    """MLflow child runs of the finetune run, one per task, opened on first use."""

    def __init__(self, tracker: Tracker, parent: RunHandle) -> None:
        self.tracker = tracker
        self.parent = parent
        self.runs: dict[str, RunHandle] = {}

    def get(self, task: str) -> RunHandle:
        if task not in self.runs:
            self.runs[task] = self.tracker.start_run(
                f"{self.parent.stage}/{task}",
                self.parent,
                tags={"cloze.stage": "finetune", "cloze.task": task},
            )
        return self.runs[task]

    def loggers(self, task: str, label: str) -> list[Any]:
        """Training curves of one run, prefixed `<arm>-lr<rate>-seed<seed>`, on the task's run."""
        return [self.get(task).lightning_logger(prefix=label)]

    def end_open(self, error: BaseException) -> None:
        """Ends the task runs still open when the stage stops: KILLED for a signal or Ctrl-C
        (as the stage's and the pipeline's runs), FAILED for an error."""
        status = final_status(error)
        for run in self.runs.values():
            run.finish(status)


def publish(ref: ArtifactRef, stage_run: RunHandle, task_runs: TaskRuns) -> None:
    """Task child runs with their figures and per-class table; summary table and chart on the
    stage run and in Prefect."""
    from flows.downstream.statistics.per_class import per_class_table
    from flows.downstream.tasks.spec import ARMS
    from flows.stages.finetune import CHART_FILE, RESULTS_FILE, SUMMARY_FILE
    from flows.stages.training_types import FinetuneOutputs

    results = json.loads((ref.path / RESULTS_FILE).read_text())
    for task, figures in FinetuneOutputs.of(ref).figures.items():
        run = task_runs.get(task)
        run.set_tags({"cloze.cache_hit": str(ref.cache_hit).lower(), "cloze.artifact_key": ref.key})
        run.log_metrics(figures.metrics)
        run.log_table(per_class_table(results[task], ARMS), PER_CLASS_FILE)
        run.finish()
    for name in (SUMMARY_FILE, CHART_FILE):
        stage_run.client.log_artifact(stage_run.run_id, str(ref.path / name))


def publish_curve(ref: ArtifactRef, stage_run: RunHandle) -> None:
    """The chart and numbers on the curve's run; each point also as metrics at step = pretraining
    tokens (`<task>/lift`, `<task>/ci_low`, ...), which MLflow's UI draws as a curve."""
    from flows.downstream.statistics.lift_points import read_points
    from flows.stages.lift_curve import CURVE_CHART, CURVE_FILE

    for name in (CURVE_CHART, CURVE_FILE):
        stage_run.client.log_artifact(stage_run.run_id, str(ref.path / name))
    for task, points in read_points(ref.outputs).items():
        for point in points:
            values = {f"{task}/{name}": v for name, v in point.items() if name != "tokens"}
            stage_run.log_metrics(values, step=int(point["tokens"]))


def publish_label_curve(ref: ArtifactRef, stage_run: RunHandle) -> None:
    """The label curve's chart, table and numbers on its run; each point also as metrics at
    step = labelled examples per seed (`<task>/lift`, `<task>/pretrained_mean`, ...)."""
    from flows.downstream.statistics.label_points import read_label_points
    from flows.stages.label_curve import CHART_FILE, POINTS_FILE, TABLE_FILE

    for name in (CHART_FILE, TABLE_FILE, POINTS_FILE):
        stage_run.client.log_artifact(stage_run.run_id, str(ref.path / name))
    for task, points in read_label_points(ref.outputs).items():
        for point in points:
            values = {f"{task}/{name}": v for name, v in point.items() if name != "labels"}
            stage_run.log_metrics(values, step=int(point["labels"]))


def publish_prefect_markdown(markdown: str, key: str, description: str) -> bool:
    """A Prefect markdown artifact, only inside a flow or task run (outside one it would fail)."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.context import FlowRunContext, TaskRunContext

    if FlowRunContext.get() is None and TaskRunContext.get() is None:
        return False
    create_markdown_artifact(markdown, key=key, description=description)
    return True
