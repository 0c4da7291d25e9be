"""The `cloze-pipeline` Prefect flow: wiring only.

Each stage runs as a Prefect task inside its own MLflow child run under the pipeline's parent run;
the stage functions themselves know nothing of either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.core.paths import RunPaths
from flows.core.redaction import redacting_errors
from flows.corpora import Corpus
from flows.orchestration.data_inputs import shards_input, task_inputs
from flows.orchestration.handoff import handed_over, resolved_here
from flows.orchestration.interrupts import note_flow_run
from flows.orchestration.publish import (
    TaskRuns,
    publish,
    publish_curve,
    publish_label_curve,
    publish_prefect_markdown,
)
from flows.orchestration.registry import distilled_description, publish_model, version_description
from flows.orchestration.retry_policy import IO_TASK_OPTIONS
from flows.orchestration.shard_runners import prefect_unit_mapper
from flows.plan import STAGES, PipelinePlan
from flows.resolve import ResolvedRun
from flows.stages import training_stages
from flows.stages.distill_plan import external_teacher
from flows.stages.init_point import InitPoint
from flows.stages.shards.stage import build_shards
from flows.stages.tokenizer import train_tokenizer
from flows.stages.tokenizer_import import import_tokenizer
from flows.summary import build_summary, render_summary, stage_figures, summary_markdown
from flows.tracking.links import child_title, current_identity, stage_title
from flows.tracking.prefect_logs import report_progress_to_prefect
from flows.tracking.run_config import log_config, log_summary
from flows.tracking.runs import STEP_OFFSET_TAG, RunHandle, Tracker, final_status

log = logging.getLogger(__name__)
# Training stages share this tag: a Prefect tag concurrency limit on it (set by
# `python -m flows.deploy`) keeps two runs from training on one machine's accelerators at once.
TRAINING_TAG = "cloze-training"


@dataclass(frozen=True)
class StageContext:
    """What every stage task needs beside its inputs: the plan, the store and the parent run."""

    plan: PipelinePlan
    store: ArtifactStore
    tracker: Tracker
    parent: RunHandle
    # A model's first registered version becomes `@champion` (what `distill`'s default teacher
    # names); the domain refresh moves that alias itself, on its own rule.
    first_version_champion: bool = True

    def tracked(
        self,
        stage: str,
        produce: Callable[[RunHandle], ArtifactRef],
        label: str | None = None,
        title: str | None = None,
    ) -> ArtifactRef:
        """Runs `produce` inside a child run of the pipeline's parent run, saying in the logs
        when the stage starts, and how it ended: computed or reused, its key, its figures. An
        error leaves it with URI credentials masked, before Prefect records it as the task run's
        state. `title` names the run where it says more than the stage (`pretrain seed 0`)."""
        log.info("%s: started", label or stage)
        with redacting_errors():
            ref = self.tracker.record_stage(stage, produce, self.parent, label=label, title=title)
        log.info(stage_end_line(label or stage, ref))
        return ref

    def publish(self, run: RunHandle, ref: ArtifactRef, name: str | None, description: str) -> None:
        """A freshly trained model's export on `run`, registered under `name` if given
        (flows/orchestration/registry.py)."""
        publish_model(
            self.tracker, self.parent, run, ref, name, description, self.first_version_champion
        )


def stage_end_line(name: str, ref: ArtifactRef) -> str:
    """`tokenizer: reused (cache hit), key 3f2a...: vocab 8000, ...`."""
    origin = "reused (cache hit)" if ref.cache_hit else "computed"
    figures = stage_figures(ref.stage, ref.outputs)
    return f"{name}: {origin}, key {ref.key}" + (f": {figures}" if figures else "")


@task(name="tokenizer", task_run_name="tokenizer", cache_policy=NO_CACHE, **IO_TASK_OPTIONS)
def tokenizer_task(ctx: StageContext, corpus: Corpus) -> ArtifactRef:
    """Trains a tokenizer, or imports the one of the checkpoint the run continues."""
    folder = ctx.plan.checkpoint

    def produce(run: RunHandle) -> ArtifactRef:
        settings = ctx.plan.tokenizer
        if folder is None:
            return train_tokenizer(settings, corpus, ctx.store)
        budget = None if settings.max_training_mb is None else int(settings.max_training_mb * 1e6)
        return import_tokenizer(folder, corpus, ctx.store, settings.extend_vocabulary, budget)

    return ctx.tracked("tokenizer", produce)


@task(name="checkpoint", task_run_name="checkpoint", cache_policy=NO_CACHE, **IO_TASK_OPTIONS)
def checkpoint_task(ctx: StageContext, tokenizer: ArtifactRef) -> tuple[ArtifactRef, InitPoint]:
    """The `transformers` checkpoint the run continues, imported into Cloze's weights once, and
    the starting point those weights are (their lineage read here, once per run)."""
    start = ctx.plan.init
    folder = start.checkpoint
    assert folder is not None

    def produce(run: RunHandle) -> ArtifactRef:
        nonlocal start
        ref = training_stages.import_checkpoint(folder, tokenizer, ctx.store)
        start = start.imported(ref)
        run.log_params(start.lineage_params())
        return ref

    return ctx.tracked("checkpoint", produce), start


@task(name="shards", task_run_name="shards", cache_policy=NO_CACHE, **IO_TASK_OPTIONS)
def shards_task(ctx: StageContext, corpus: Corpus, tokenizer: ArtifactRef) -> ArtifactRef:
    settings = ctx.plan.shards
    return ctx.tracked(
        "shards",
        lambda run: build_shards(
            settings, corpus, tokenizer, ctx.store, prefect_unit_mapper(settings)
        ),
    )


def pretrain_task_run_name() -> str:
    """`pretrain seed 0`: the Prefect task run named as its MLflow run is."""
    from prefect.runtime import task_run

    ctx = task_run.parameters["ctx"]
    return stage_title("pretrain", ctx.plan.pretrain.seed)


@task(
    name="pretrain",
    task_run_name=pretrain_task_run_name,
    cache_policy=NO_CACHE,
    tags=[TRAINING_TAG],
)
def pretrain_task(
    ctx: StageContext, shards: ArtifactRef, tokenizer: ArtifactRef, start: InitPoint
) -> ArtifactRef:
    """Pretrains from `start`: random init, a pretrain artifact, or an imported checkpoint."""

    def pretrain_and_publish(run: RunHandle) -> ArtifactRef:
        run.log_inputs([shards_input(shards)])
        if start.lineage is not None:
            run.log_params(start.lineage_params())
        published = start.published()
        if published is not None:  # `compare` draws a continued run after the steps before it
            run.set_tags({STEP_OFFSET_TAG: ctx.tracker.steps_before(published)})
        ref = training_stages.pretrain(
            ctx.plan.pretrain, shards, tokenizer, ctx.store, [run.lightning_logger()], start
        )
        description = version_description(ctx.plan, start, shards, ref)
        ctx.publish(run, ref, ctx.plan.tracking.registered_model, description)
        return ref

    return ctx.tracked(
        "pretrain", pretrain_and_publish, title=stage_title("pretrain", ctx.plan.pretrain.seed)
    )


@task(name="distill", task_run_name="distill", cache_policy=NO_CACHE, tags=[TRAINING_TAG])
def distill_task(
    ctx: StageContext, teacher: ArtifactRef, shards: ArtifactRef, tokenizer: ArtifactRef
) -> ArtifactRef:
    settings = ctx.plan.distill
    assert settings is not None

    def distill_and_publish(run: RunHandle) -> ArtifactRef:
        run.log_inputs([shards_input(shards)])
        run.set_tags({"cloze.teacher": settings.distill.teacher or teacher.key})
        ref = training_stages.distill(
            settings, teacher, shards, tokenizer, ctx.store, [run.lightning_logger()]
        )
        description = distilled_description(settings.distill.teacher or teacher.key, ref)
        ctx.publish(run, ref, settings.distill.registered_model, description)
        return ref

    return ctx.tracked("distill", distill_and_publish)


def finetune_task_run_name() -> str:
    """`finetune`, or `challenger finetune` for an arm's: as its MLflow run is named."""
    from prefect.runtime import task_run

    return child_title(task_run.parameters.get("label", "finetune"))


@task(
    name="finetune",
    task_run_name=finetune_task_run_name,
    cache_policy=NO_CACHE,
    tags=[TRAINING_TAG],
)
def finetune_task(
    ctx: StageContext,
    pretrained: ArtifactRef,
    tokenizer: ArtifactRef,
    student: ArtifactRef | None = None,
    label: str = "finetune",
    base: ArtifactRef | None = None,
) -> ArtifactRef:
    """`label` tells the runs apart where one flow fine-tunes twice (`finetune-challenger`);
    `base` (an imported checkpoint) is fine-tuned as it was, the `base` arm."""
    plan = ctx.plan

    def evaluate(run: RunHandle) -> ArtifactRef:
        task_runs = TaskRuns(ctx.tracker, run)  # one child run per downstream task
        try:
            ref = training_stages.finetune(
                plan.finetune,
                plan.pretrain.seed,
                plan.pretrain.trainer,
                pretrained,
                tokenizer,
                ctx.store,
                task_runs.loggers,
                student,
                base,
            )
        except BaseException as error:
            task_runs.end_open(error)
            raise
        for name, inputs in task_inputs(plan.finetune).items():
            task_runs.get(name).log_inputs(inputs)
        publish(ref, run, task_runs)
        return ref

    return ctx.tracked("finetune", evaluate, label)


@task(name="lift_curve", task_run_name="lift_curve", cache_policy=NO_CACHE, tags=[TRAINING_TAG])
def lift_curve_task(ctx: StageContext, refs: dict[str, ArtifactRef]) -> ArtifactRef:
    """The lift at each of `finetune.checkpoints` below 1.0."""
    return curve(ctx, "lift_curve", training_stages.lift_curve, publish_curve, refs)


@task(name="label_curve", task_run_name="label_curve", cache_policy=NO_CACHE, tags=[TRAINING_TAG])
def label_curve_task(ctx: StageContext, refs: dict[str, ArtifactRef]) -> ArtifactRef:
    """Every task again at each of `finetune.label_counts` labelled examples per seed."""
    return curve(ctx, "label_curve", training_stages.label_curve, publish_label_curve, refs)


def curve(
    ctx: StageContext,
    stage: str,
    compute: Callable[..., ArtifactRef | None],
    publish_figures: Callable[[ArtifactRef, RunHandle], None],
    refs: dict[str, ArtifactRef],
) -> ArtifactRef:
    """A curve stage (lift or label): its points evaluated with one MLflow run per task, then
    its chart and table published on the stage's own run."""
    plan = ctx.plan

    def evaluate(run: RunHandle) -> ArtifactRef:
        task_runs = TaskRuns(ctx.tracker, run)
        try:
            ref = compute(
                plan.finetune,
                plan.pretrain.seed,
                plan.pretrain.trainer,
                refs,
                ctx.store,
                task_runs.loggers,
            )
        except BaseException as error:
            task_runs.end_open(error)
            raise
        for task_run in task_runs.runs.values():
            task_run.finish()
        assert ref is not None  # the stage runs only when points are asked for
        publish_figures(ref, run)
        return ref

    return ctx.tracked(stage, evaluate)


def pretraining_pipeline(
    resolved: ResolvedRun, name: str | None = None, flow_object: Any = None, **options: Any
) -> Any:
    """Runs the `cloze-pipeline` flow (or `flow_object`, a flow of the same signature: `cloze
    evaluate`'s) on a resolved run (flows/resolve.py) through its `until`; `options` go to the
    flow call (`return_state`).

    `name` names the flow run (the CLI's `<experiment>-<corpus>-<timestamp>`); its MLflow runs
    take the same name. The flow is given the redacted config; the resolved run, secrets and
    all, stays in this process (flows/orchestration/handoff.py).
    """
    flow_object = flow_object or pipeline_flow
    flow_object = flow_object.with_options(flow_run_name=name) if name else flow_object
    with handed_over(resolved) as config:
        return flow_object(config, resolved.until, **options)


# One job, one flow: a run from the CLI and a deployment's run (flows/deploy/entrypoints.py) are
# filed under the same flow name, so the flow's page, filters and run history hold them all.
PIPELINE_FLOW = "cloze-pipeline"


@flow(name=PIPELINE_FLOW, log_prints=True)
def pipeline_flow(config: dict[str, Any], until: str = "finetune") -> dict[str, Any]:
    """Tokenizer -> shards -> pretrain -> finetune, each reused when its inputs are unchanged.

    `until` stops after that stage (a stage deployment): the stages before it are computed or,
    through the content-addressed store, reused.
    """
    return run_stages(resolved_here(config, until))


@redacting_errors()  # the flow run's state message and logged traceback hold no secret
def run_stages(resolved: ResolvedRun) -> dict[str, Any]:
    """The pipeline's stages through `resolved.until`, as tasks of the flow run this is called
    in (the CLI's flow, or a deployment's own run, whose graph then shows them); its MLflow runs
    take that run's name. The config is read as resolved: nothing here adopts or validates it
    again, but for a `models:/` URI, which only the tracker opened here can look up."""
    until = resolved.until
    assert until is not None, "resolve_run(..., until=None) runs no stage"
    note_flow_run()  # a signal marks it Cancelled (interrupts.py)
    report_progress_to_prefect()
    paths = RunPaths.from_settings(resolved.run.paths)
    tracker: Tracker | None = None
    registry_uri = resolved.registry_uri
    if registry_uri is not None:
        tracker = Tracker.for_run(resolved.run.tracking, paths)
        resolved = resolved.from_registry(tracker.resolve_model_uri)
    for note in resolved.notes:
        print(note)
    plan = PipelinePlan.from_run_config(resolved.run, init=resolved.init)
    if plan.precision is not None:  # what every stage trains in, and why
        plan.precision.report(log)
    corpus = plan.open_corpus()  # a missing path or empty glob fails here, before tracking
    if until == "finetune":
        for note in plan.finetune.recipe_notes():  # before any stage, not after the run
            log.info(note)
    store = ArtifactStore(paths.artifacts)
    tracker = tracker or Tracker.for_run(plan.tracking, paths)
    tracker.identity = current_identity()
    teacher: ArtifactRef | None = None
    if plan.distill is not None and plan.distill.distill.external_teacher:
        # Resolved and checked now: a bad teacher fails before any stage spends time.
        def import_teacher(folder: Path, key: str) -> ArtifactRef:
            tokenizer_ref = import_tokenizer(folder, corpus, store, key=key)
            return training_stages.import_checkpoint(folder, tokenizer_ref, store, key)

        teacher, tokenizer = external_teacher(
            plan.distill.distill, plan.tokenizer, store, tracker.resolve_model_uri, import_teacher
        )
        plan = replace(plan, tokenizer=tokenizer)
    tracker.close_stale_runs()
    parent = tracker.start_run(
        "pipeline",
        tags={
            "cloze.model": plan.pretrain.model.name,
            "cloze.corpus": plan.corpus.kind,
            **({"cloze.init_from": registry_uri} if registry_uri else {}),
        },
    )
    log_config(parent, resolved.config)
    if plan.precision is not None:
        parent.log_params(plan.precision.params)
    ctx = StageContext(plan, store, tracker, parent)
    try:
        wanted = STAGES[: STAGES.index(until) + 1]
        refs = {"tokenizer": tokenizer_task(ctx, corpus)}
        start = plan.init
        if plan.checkpoint is not None:
            refs["checkpoint"], start = checkpoint_task(ctx, refs["tokenizer"])
        if "shards" in wanted:
            refs["shards"] = shards_task(ctx, corpus, refs["tokenizer"])
            parent.log_inputs([shards_input(refs["shards"])])
        if "pretrain" in wanted:
            refs["pretrain"] = teacher or pretrain_task(
                ctx, refs["shards"], refs["tokenizer"], start
            )
        if "distill" in wanted and plan.distill is not None:
            refs["distill"] = distill_task(ctx, refs["pretrain"], refs["shards"], refs["tokenizer"])
        if "finetune" in wanted:
            parent.log_inputs(
                [item for items in task_inputs(plan.finetune).values() for item in items]
            )
            refs["finetune"] = finetune_task(
                ctx,
                refs["pretrain"],
                refs["tokenizer"],
                refs.get("distill"),
                base=refs.get("checkpoint"),
            )
        # Only asked-for curves become a task: each task run is a round of Prefect API calls.
        if "finetune" in wanted and plan.finetune.curve_fractions:
            refs["lift_curve"] = lift_curve_task(ctx, dict(refs))
        if "finetune" in wanted and plan.finetune.curve_counts:
            refs["label_curve"] = label_curve_task(ctx, dict(refs))
    except BaseException as error:
        parent.finish(final_status(error))
        raise
    summary = build_summary(refs, tracker.tracking_uri, parent.run_id, plan.tracking.experiment)
    summary["mlflow_run_url"] = tracker.run_url(parent.run_id)
    log_summary(parent, summary)
    parent.finish()
    print(render_summary(summary))  # through `until`: a run that stops early says so too
    # The run's one artifact in Prefect (a CLI run's and a deployment's alike): headline first.
    publish_prefect_markdown(
        summary_markdown(summary, until),
        key=f"cloze-{until}-summary",
        description="Cloze pipeline run: the verdict per task, the stages, the MLflow run",
    )
    return summary
