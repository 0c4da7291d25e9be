"""The `cloze-pipeline` Prefect flow: wiring only.

Each stage runs as a Prefect task inside its own MLflow child run under the pipeline's parent run;
the stage functions themselves know nothing of either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.states import State

from flows.core.artifacts import MANIFEST_FILE, ArtifactError, ArtifactRef, ArtifactStore
from flows.core.config import to_yaml
from flows.core.paths import RunPaths
from flows.core.redaction import redact_secrets, redacting_errors
from flows.core.settings import ConfigError
from flows.corpora import Corpus
from flows.corpora.formats import CorpusInputError
from flows.orchestration.data_inputs import shards_input, task_inputs
from flows.orchestration.interrupts import note_flow_run
from flows.orchestration.publish import (
    TaskRuns,
    publish,
    publish_curve,
    publish_label_curve,
    publish_prefect_markdown,
)
from flows.orchestration.shard_runners import prefect_unit_mapper
from flows.plan import STAGES, PipelinePlan
from flows.refresh.promotion import CHAMPION
from flows.resolve import ResolvedRun, resolve_run
from flows.stages import training_stages
from flows.stages.distill_plan import external_teacher
from flows.stages.init_source import HUGGINGFACE_DIR
from flows.stages.shards.stage import ShardOutputs, build_shards
from flows.stages.tokenizer import train_tokenizer
from flows.stages.tokenizer_import import import_tokenizer
from flows.stages.training_types import PretrainOutputs, PretrainSettings
from flows.summary import build_summary, render_summary, stage_figures, summary_markdown
from flows.tracking.links import child_title, corpus_label, current_identity, stage_title
from flows.tracking.prefect_logs import report_progress_to_prefect
from flows.tracking.runs import (
    ARTIFACT_KEY_TAG,
    ARTIFACT_PATH_TAG,
    STEP_OFFSET_TAG,
    RunHandle,
    Tracker,
    final_status,
)
from flows.training.precision_choice import PrecisionChoice
from lightning_modules.data.shard_format import CorruptShardError

log = logging.getLogger(__name__)
# Training stages share this tag: a Prefect tag concurrency limit on it (set by
# `python -m flows.deploy`) keeps two runs from training on one machine's accelerators at once.
TRAINING_TAG = "cloze-training"
# Errors that the same inputs raise every time: retrying them only delays the `error:` line.
DETERMINISTIC_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    CorpusInputError,  # and TaskInputError
    ArtifactError,
    CorruptShardError,
    UnicodeError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


def can_heal(error: BaseException) -> bool:
    """Whether a retry could succeed: I/O that fails transiently, never a deterministic error.

    The whole cause chain counts, so an input error wrapped by a worker pool is still one.
    """
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    if any(isinstance(link, DETERMINISTIC_ERRORS) for link in chain):
        return False
    return any(isinstance(link, (OSError, TimeoutError)) for link in chain)


def retry_if_it_can_heal(task: Any, task_run: Any, state: State) -> bool:
    """Prefect's `retry_condition_fn`: a failed state holds the exception as its data."""
    error = state.data if isinstance(state.data, BaseException) else None
    return error is not None and can_heal(error)


# Reading and tokenizing text can fail transiently (network filesystems, the hub); retrying is
# safe because a stage publishes atomically. Training is never retried: a rerun resumes instead.
IO_TASK_OPTIONS: dict[str, Any] = {
    "retries": 2,
    "retry_delay_seconds": 30,
    "retry_condition_fn": retry_if_it_can_heal,
    "tags": ["cloze-io"],
}


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
def checkpoint_task(ctx: StageContext, tokenizer: ArtifactRef) -> ArtifactRef:
    """The `transformers` checkpoint the run continues, imported into Cloze's weights once."""
    folder = ctx.plan.checkpoint
    assert folder is not None

    def produce(run: RunHandle) -> ArtifactRef:
        ref = training_stages.import_checkpoint(folder, tokenizer, ctx.store)
        lineage = training_stages.read_lineage(ref.path)
        assert lineage is not None
        run.log_params(training_stages.lineage_params(lineage))
        return ref

    return ctx.tracked("checkpoint", produce)


@task(name="shards", task_run_name="shards", cache_policy=NO_CACHE, **IO_TASK_OPTIONS)
def shards_task(ctx: StageContext, corpus: Corpus, tokenizer: ArtifactRef) -> ArtifactRef:
    settings = ctx.plan.shards
    return ctx.tracked(
        "shards",
        lambda run: build_shards(
            settings, corpus, tokenizer, ctx.store, prefect_unit_mapper(settings)
        ),
    )


def publish_model(
    ctx: StageContext, run: RunHandle, ref: ArtifactRef, name: str | None, description: str
) -> None:
    """Logs a freshly trained model's Hugging Face export; registers it under `name` if given,
    the first version as `@champion`, and tags the parent run with the version too (the
    pipeline's run is the one a person opens)."""
    export = ref.path / HUGGINGFACE_DIR
    if ref.cache_hit or not export.is_dir():
        return
    run.log_artifacts(export, HUGGINGFACE_DIR)  # tokenizer.json travels in it
    if name:
        version = ctx.tracker.register_model(
            name,
            run,
            HUGGINGFACE_DIR,
            {ARTIFACT_KEY_TAG: ref.key, ARTIFACT_PATH_TAG: str(ref.path)},
            description,
        )
        registered = {"cloze.registered_model": f"{name}/{version}"}
        if ctx.first_version_champion and ctx.tracker.version_by_alias(name, CHAMPION) is None:
            ctx.tracker.set_alias(name, CHAMPION, version)
            log.info("registered %s version %s as models:/%s@%s", name, version, name, CHAMPION)
        run.set_tags(registered)
        ctx.parent.set_tags(registered)


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
    ctx: StageContext,
    shards: ArtifactRef,
    tokenizer: ArtifactRef,
    checkpoint: ArtifactRef | None = None,
) -> ArtifactRef:
    """Pretrains from random init, from a pretrain artifact, or from an imported `checkpoint`."""

    def pretrain_and_publish(run: RunHandle) -> ArtifactRef:
        run.log_inputs([shards_input(shards)])
        settings = ctx.plan.pretrain
        if checkpoint is not None:
            settings = replace(settings, init_from=str(checkpoint.path))
        lineage = (
            training_stages.read_lineage(Path(settings.init_from)) if settings.init_from else None
        )
        if lineage is not None:
            run.log_params(training_stages.lineage_params(lineage))
        start = published_artifact(settings.init_from)
        if start is not None:  # `compare` draws a continued run after the steps before it
            run.set_tags({STEP_OFFSET_TAG: ctx.tracker.steps_before(start)})
        ref = training_stages.pretrain(
            settings, shards, tokenizer, ctx.store, [run.lightning_logger()]
        )
        publish_model(
            ctx,
            run,
            ref,
            ctx.plan.tracking.registered_model,
            version_description(ctx.plan, settings, shards, ref),
        )
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
        description = (
            f"Student distilled from teacher {settings.distill.teacher or teacher.key} "
            f"(distill artifact {ref.key}); see the run's distill metrics for its scores."
        )
        publish_model(ctx, run, ref, settings.distill.registered_model, description)
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


def published_artifact(path: str | None) -> ArtifactRef | None:
    """The published artifact at `path` (`<root>/<stage>/<key>`), if it is one."""
    directory = Path(path) if path else None
    if directory is None or not (directory / MANIFEST_FILE).is_file():
        return None  # a directory of weights outside any store: no steps on record
    return ArtifactStore(directory.parents[1]).lookup(directory.parent.name, directory.name)


def version_description(
    plan: PipelinePlan, settings: PretrainSettings, shards: ArtifactRef, ref: ArtifactRef
) -> str:
    """What a registry version is: its data, its recipe and its held-out scores."""
    data, outputs = ShardOutputs.of(shards), PretrainOutputs.of(ref)
    lineage = training_stages.read_lineage(ref.path)
    start = (
        training_stages.lineage_text(lineage)
        if lineage is not None
        else f"continued from {settings.init_from}"
        if settings.init_from
        else "random init"
    )
    return "\n".join(
        [
            f"Data: {corpus_label(plan.corpus.model_dump())} ({plan.corpus.kind}), "
            f"{data.train_documents:,} documents, {data.train_tokens:,} training tokens "
            f"(shards {shards.key}).",
            f"Recipe: model {settings.model.name}, objective {settings.objective.name}, "
            f"{outputs.steps:,} steps over {outputs.train_tokens:,} tokens, seed {settings.seed}, "
            f"{start}.",
            f"Scores: validation loss {outputs.initial_val_loss:.3f} -> {outputs.val_loss:.3f}"
            + "".join(
                f", {name} {value:.4g}"
                for name, value in sorted(outputs.validation.items())
                if name != "val_loss"
            )
            + ".",
        ]
    )


# The run in progress in this process, resolved by its entry point; Prefect only ever sees its
# config redacted.
_RESOLVED: ContextVar[ResolvedRun | None] = ContextVar("cloze_resolved", default=None)


def pretraining_pipeline(
    resolved: ResolvedRun, name: str | None = None, flow_object: Any = None, **options: Any
) -> Any:
    """Runs the `cloze-pipeline` flow (or `flow_object`, a flow of the same signature: `cloze
    evaluate`'s) on a resolved run (flows/resolve.py) through its `until`; `options` go to the
    flow call (`return_state`).

    `name` names the flow run (the CLI's `<experiment>-<corpus>-<timestamp>`); its MLflow runs
    take the same name. Prefect stores a flow's parameters in its database and shows them in the
    UI, so the flow is given the redacted config; the resolved run, secrets and all, stays in
    this process (a context variable) and the flow takes it back from there.
    """
    flow_object = flow_object or pipeline_flow
    flow_object = flow_object.with_options(flow_run_name=name) if name else flow_object
    token = _RESOLVED.set(resolved)
    try:
        return flow_object(redact_secrets(resolved.config), resolved.until, **options)
    finally:
        _RESOLVED.reset(token)


def resolved_here(config: dict[str, Any], until: str, pretraining: bool = True) -> ResolvedRun:
    """The run this process resolved into `config`, or `config` resolved now: a flow run
    started some other way (the UI) goes through the same one function, once. `pretraining`:
    as resolve_run's (False for `cloze evaluate`)."""
    held = _RESOLVED.get()
    if (
        held is not None
        and (held.until, held.pretraining) == (until, pretraining)
        and redact_secrets(held.config) == config
    ):
        return held
    return resolve_run(config, until, pretraining=pretraining)


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
    plan = PipelinePlan.from_run_config(resolved.run)
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
        parent.log_params(precision_params(plan.precision))
    ctx = StageContext(plan, store, tracker, parent)
    try:
        wanted = STAGES[: STAGES.index(until) + 1]
        refs = {"tokenizer": tokenizer_task(ctx, corpus)}
        if plan.checkpoint is not None:
            refs["checkpoint"] = checkpoint_task(ctx, refs["tokenizer"])
        if "shards" in wanted:
            refs["shards"] = shards_task(ctx, corpus, refs["tokenizer"])
            parent.log_inputs([shards_input(refs["shards"])])
        if "pretrain" in wanted:
            refs["pretrain"] = teacher or pretrain_task(
                ctx, refs["shards"], refs["tokenizer"], refs.get("checkpoint")
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
    parent.log_metrics(
        {
            f"{stage}.{name}": value
            for stage, outputs in summary["stages"].items()
            for name, value in outputs.items()
        }
    )
    parent.finish()
    print(render_summary(summary))  # through `until`: a run that stops early says so too
    # The run's one artifact in Prefect (a CLI run's and a deployment's alike): headline first.
    publish_prefect_markdown(
        summary_markdown(summary, until),
        key=f"cloze-{until}-summary",
        description="Cloze pipeline run: the verdict per task, the stages, the MLflow run",
    )
    return summary


def precision_params(choice: PrecisionChoice) -> dict[str, str]:
    """Beside `trainer.precision` as configured (`auto`): what it resolved to, and why."""
    return {
        "trainer.precision_resolved": choice.precision,
        "trainer.precision_reason": choice.reason,
    }


def log_config(run: RunHandle, config: dict[str, Any]) -> None:
    """The config, secrets masked: whole as `config.yaml`, and as params flattened under their
    section's prefix (`trainer.max_steps`), so MLflow's table groups them by section.

    The params list only the catalog entries of the tasks the run fine-tunes on: the other
    tasks' files and columns (a third of all keys) would be columns of noise in the table.
    """
    loggable = redact_secrets(config)
    run.log_params(params_of(loggable))
    run.log_text(to_yaml(loggable), "config.yaml")


def params_of(config: dict[str, Any]) -> dict[str, Any]:
    finetune = config.get("finetune")
    if not isinstance(finetune, dict) or not isinstance(finetune.get("catalog"), dict):
        return config
    tasks = set(finetune.get("tasks") or [])
    catalog = {name: spec for name, spec in finetune["catalog"].items() if name in tasks}
    return {**config, "finetune": {**finetune, "catalog": catalog}}
