"""The `cloze-evaluate` Prefect flow: a checkpoint's tokenizer and weights imported (as a
continuation run imports them), then the evaluate stage (flows/stages/checkpoint_evaluation.py).

No corpus is opened, no shards built, nothing pretrained. The MLflow runs are those of a pipeline
through its finetune stage: a parent run, a child run per stage (tokenizer, checkpoint,
finetune) and one per task under the finetune run. The CLI (`cloze evaluate`, cli.py) and the
`evaluate` deployment run the same flow, so both are filed under one flow name.
"""

from __future__ import annotations

import logging
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import State

from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.core.paths import RunPaths
from flows.core.redaction import redacting_errors
from flows.evaluate.checks import check_evaluable
from flows.orchestration.flow_runs import (
    EXPECTED_ERRORS,
    evaluation_name,
    read_form,
    refused,
    resolve_form,
)
from flows.orchestration.handoff import resolved_here
from flows.orchestration.publish import TaskRuns, publish
from flows.orchestration.retry_policy import IO_TASK_OPTIONS
from flows.orchestration.run_form import Task
from flows.pipeline import TRAINING_TAG, StageContext, checkpoint_task
from flows.plan import PipelinePlan
from flows.resolve import ResolvedRun
from flows.stages import training_stages
from flows.stages.tokenizer_import import import_tokenizer
from flows.summary import build_summary, render_summary
from flows.tracking.links import current_identity
from flows.tracking.prefect_logs import report_progress_to_prefect
from flows.tracking.run_config import log_config, log_summary
from flows.tracking.runs import RunHandle, Tracker, final_status

log = logging.getLogger(__name__)
EVALUATE_FLOW = "cloze-evaluate"


@task(name="tokenizer", task_run_name="tokenizer", cache_policy=NO_CACHE, **IO_TASK_OPTIONS)
def imported_tokenizer_task(ctx: StageContext) -> ArtifactRef:
    """The checkpoint's tokenizer, imported as a continuation imports it (the same artifact),
    its fit to a corpus not measured: there is none."""
    folder = ctx.plan.checkpoint
    assert folder is not None
    return ctx.tracked("tokenizer", lambda run: import_tokenizer(folder, None, ctx.store))


@task(name="finetune", task_run_name="finetune", cache_policy=NO_CACHE, tags=[TRAINING_TAG])
def evaluate_task(
    ctx: StageContext, checkpoint: ArtifactRef, tokenizer: ArtifactRef
) -> ArtifactRef:
    """The checkpoint's base and random-init arms per task, published as a finetune stage."""
    plan = ctx.plan

    def evaluate(run: RunHandle) -> ArtifactRef:
        task_runs = TaskRuns(ctx.tracker, run)  # one child run per downstream task
        try:
            ref = training_stages.evaluate_checkpoint(
                plan.finetune,
                plan.pretrain.seed,
                plan.pretrain.trainer,
                checkpoint,
                tokenizer,
                ctx.store,
                task_runs.loggers,
            )
        except BaseException as error:
            task_runs.end_open(error)
            raise
        publish(ref, run, task_runs)
        return ref

    return ctx.tracked("finetune", evaluate)


@flow(name=EVALUATE_FLOW, log_prints=True)
def evaluate_flow(config: dict[str, Any], until: str = "finetune") -> dict[str, Any]:
    """A checkpoint (`pretrain.init_from`) as it is, on the configured tasks: its tokenizer and
    weights imported, then each task's base and random-init arms. `until` is always finetune
    (the signature the CLI's runner calls every flow with)."""
    return run_evaluation(resolved_here(config, until, pretraining=False))


@redacting_errors()  # the flow run's state message and logged traceback hold no secret
def run_evaluation(resolved: ResolvedRun) -> dict[str, Any]:
    """The evaluation's stages as tasks of the flow run this is called in; the summary."""
    report_progress_to_prefect()
    paths = RunPaths.from_settings(resolved.run.paths)
    tracker: Tracker | None = None
    registry_uri = resolved.registry_uri
    if registry_uri is not None:
        tracker = Tracker.for_run(resolved.run.tracking, paths)
        resolved = resolved.from_registry(tracker.resolve_model_uri)
    check_evaluable(resolved)
    plan = PipelinePlan.from_run_config(resolved.run, init=resolved.init)
    assert plan.checkpoint is not None  # check_evaluable: a transformers checkpoint
    print(
        f"evaluate: the checkpoint {plan.checkpoint} as it is, on "
        f"{', '.join(plan.finetune.tasks)}: base and random-init arms, no pretraining"
    )
    if plan.precision is not None:
        plan.precision.report(log)
    for note in plan.finetune.recipe_notes():
        log.info(note)
    store = ArtifactStore(paths.artifacts)
    tracker = tracker or Tracker.for_run(plan.tracking, paths)
    tracker.identity = current_identity()
    tracker.close_stale_runs()
    parent = tracker.start_run(
        "evaluate",
        tags={
            "cloze.model": plan.pretrain.model.name,
            "cloze.init_from": registry_uri or str(plan.checkpoint),
        },
    )
    log_config(parent, resolved.config)
    if plan.precision is not None:
        parent.log_params(plan.precision.params)
    ctx = StageContext(plan, store, tracker, parent)
    try:
        refs = {"tokenizer": imported_tokenizer_task(ctx)}
        refs["checkpoint"], _ = checkpoint_task(ctx, refs["tokenizer"])
        refs["finetune"] = evaluate_task(ctx, refs["checkpoint"], refs["tokenizer"])
    except BaseException as error:
        parent.finish(final_status(error))
        raise
    summary = build_summary(refs, tracker.tracking_uri, parent.run_id, plan.tracking.experiment)
    summary["mlflow_run_url"] = tracker.run_url(parent.run_id)
    log_summary(parent, summary)
    parent.finish()
    print(render_summary(summary))
    return summary


@flow(name=EVALUATE_FLOW, flow_run_name=evaluation_name, log_prints=True)
def evaluate_deployment(
    init_from: str = "",
    tasks: list[Task] = [],  # noqa: B006 (defaults the UI shows; never mutated)
    overrides: list[str] = [],  # noqa: B006
) -> dict[str, Any] | State:
    """A checkpoint as it is on the tasks: its base and random-init arms with their grids, seeds,
    intervals and baselines; no corpus, no pretraining.

    Args:
        init_from: The checkpoint to evaluate (pretrain.init_from): a transformers checkpoint
            folder on the worker, a Hub name, or models:/NAME@ALIAS. Required.
        tasks: Downstream tasks (finetune.tasks). Empty: the configured tasks.
        overrides: Any other Hydra overrides, as on the command line, applied last, e.g.
            finetune.train_examples=1000 or finetune.seeds=3.
    """
    try:
        form = read_form(init_from=init_from, tasks=tasks, overrides=overrides)
        resolved = resolve_form(form, pretraining=False)
        check_evaluable(resolved)
        summary = run_evaluation(resolved)
    except EXPECTED_ERRORS as error:
        return refused(error)
    create_markdown_artifact(
        render_summary(summary).replace("\n", "  \n"),
        key="cloze-evaluate-summary",
        description="Cloze evaluate: a checkpoint as it is, base and random init per task",
    )
    return summary
