"""The `pretraining-pipeline` Prefect flow: wiring only.

Each stage runs as a Prefect task inside its own MLflow child run under the pipeline's parent run;
the stage functions themselves know nothing of either.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.states import State

from flows.core.artifacts import ArtifactError, ArtifactRef, ArtifactStore
from flows.core.config import to_yaml
from flows.core.paths import RunPaths
from flows.core.redaction import redact_secrets
from flows.core.settings import ConfigError
from flows.corpora import Corpus, open_corpus
from flows.corpora.formats import CorpusInputError
from flows.plan import PipelinePlan as PipelinePlan  # re-exported: tests and callers use it
from flows.plan import load_run_config
from flows.stages.distill import distill
from flows.stages.distill_plan import external_teacher
from flows.stages.finetune import finetune
from flows.stages.lift_curve import lift_curve
from flows.stages.pretrain import HUGGINGFACE_DIR, pretrain
from flows.stages.shards.runners import prefect_unit_mapper
from flows.stages.shards.stage import build_shards
from flows.stages.tokenizer import train_tokenizer
from flows.summary import build_summary, render_summary
from flows.tracking.publish import TaskRuns, publish, publish_curve
from flows.tracking.runs import (
    ARTIFACT_KEY_TAG,
    ARTIFACT_PATH_TAG,
    RunHandle,
    Tracker,
    final_status,
)
from lightning_modules.data.shard_format import CorruptShardError

# distill runs only when configured (distill=default); with distill.teacher set, pretrain is
# skipped and the given teacher stands in for it.
STAGES = ("tokenizer", "shards", "pretrain", "distill", "finetune")
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

    def tracked(self, stage: str, produce: Callable[[RunHandle], ArtifactRef]) -> ArtifactRef:
        """Runs `produce` inside a child run of the pipeline's parent run."""
        return self.tracker.record_stage(stage, produce, self.parent)


@task(name="tokenizer", cache_policy=NO_CACHE, **IO_TASK_OPTIONS)
def tokenizer_task(ctx: StageContext, corpus: Corpus) -> ArtifactRef:
    return ctx.tracked(
        "tokenizer", lambda run: train_tokenizer(ctx.plan.tokenizer, corpus, ctx.store)
    )


@task(name="shards", cache_policy=NO_CACHE, **IO_TASK_OPTIONS)
def shards_task(ctx: StageContext, corpus: Corpus, tokenizer: ArtifactRef) -> ArtifactRef:
    settings = ctx.plan.shards
    return ctx.tracked(
        "shards",
        lambda run: build_shards(
            settings, corpus, tokenizer, ctx.store, prefect_unit_mapper(settings)
        ),
    )


def publish_model(ctx: StageContext, run: RunHandle, ref: ArtifactRef, name: str | None) -> None:
    """Logs a freshly trained model's Hugging Face export; registers it under `name` if given."""
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
        )
        run.set_tags({"cloze.registered_model": f"{name}/{version}"})


@task(name="pretrain", cache_policy=NO_CACHE, tags=[TRAINING_TAG])
def pretrain_task(ctx: StageContext, shards: ArtifactRef, tokenizer: ArtifactRef) -> ArtifactRef:
    def pretrain_and_publish(run: RunHandle) -> ArtifactRef:
        settings = ctx.plan.pretrain
        if settings.init_from and settings.init_from.startswith("models:/"):
            run.set_tags({"cloze.init_from": settings.init_from})
            resolved = ctx.tracker.resolve_model_uri(settings.init_from)
            settings = replace(settings, init_from=str(resolved))
        ref = pretrain(settings, shards, tokenizer, ctx.store, [run.lightning_logger()])
        publish_model(ctx, run, ref, ctx.plan.tracking.registered_model)
        return ref

    return ctx.tracked("pretrain", pretrain_and_publish)


@task(name="distill", cache_policy=NO_CACHE, tags=[TRAINING_TAG])
def distill_task(
    ctx: StageContext, teacher: ArtifactRef, shards: ArtifactRef, tokenizer: ArtifactRef
) -> ArtifactRef:
    settings = ctx.plan.distill
    assert settings is not None

    def distill_and_publish(run: RunHandle) -> ArtifactRef:
        run.set_tags({"cloze.teacher": settings.distill.teacher or teacher.key})
        ref = distill(settings, teacher, shards, tokenizer, ctx.store, [run.lightning_logger()])
        publish_model(ctx, run, ref, settings.distill.registered_model)
        return ref

    return ctx.tracked("distill", distill_and_publish)


@task(name="finetune", cache_policy=NO_CACHE, tags=[TRAINING_TAG])
def finetune_task(
    ctx: StageContext,
    pretrained: ArtifactRef,
    tokenizer: ArtifactRef,
    student: ArtifactRef | None = None,
) -> ArtifactRef:
    plan = ctx.plan

    def evaluate(run: RunHandle) -> ArtifactRef:
        task_runs = TaskRuns(ctx.tracker, run)  # one child run per downstream task
        try:
            ref = finetune(
                plan.finetune,
                plan.pretrain.seed,
                plan.pretrain.trainer,
                pretrained,
                tokenizer,
                ctx.store,
                task_runs.loggers,
                student,
            )
        except BaseException:
            task_runs.fail_open()
            raise
        publish(ref, run, task_runs)
        return ref

    return ctx.tracked("finetune", evaluate)


@task(name="lift_curve", cache_policy=NO_CACHE, tags=[TRAINING_TAG])
def lift_curve_task(ctx: StageContext, refs: dict[str, ArtifactRef]) -> ArtifactRef:
    """The lift at each of `finetune.checkpoints` below 1.0."""
    plan = ctx.plan

    def evaluate(run: RunHandle) -> ArtifactRef:
        task_runs = TaskRuns(ctx.tracker, run)
        try:
            ref = lift_curve(
                plan.finetune,
                plan.pretrain.seed,
                plan.pretrain.trainer,
                refs,
                ctx.store,
                task_runs.loggers,
            )
        except BaseException:
            task_runs.fail_open()
            raise
        for task_run in task_runs.runs.values():
            task_run.finish()
        assert ref is not None  # curve_fractions is not empty
        publish_curve(ref, run)
        return ref

    return ctx.tracked("lift_curve", evaluate)


# The full config of the flow run in progress in this process; Prefect only ever sees it redacted.
_UNREDACTED: ContextVar[dict[str, Any] | None] = ContextVar("cloze_unredacted", default=None)


def pretraining_pipeline(config: dict[str, Any], until: str = "finetune", **options: Any) -> Any:
    """Runs the `pretraining-pipeline` flow; `options` go to the flow call (`return_state`).

    Prefect stores a flow's parameters in its database and shows them in the UI, so the flow is
    given the redacted config; the secrets it masks stay in this process (a context variable)
    and the flow takes them back from there.
    """
    token = _UNREDACTED.set(config)
    try:
        return pipeline_flow(redact_secrets(config), until, **options)
    finally:
        _UNREDACTED.reset(token)


def unredacted(config: dict[str, Any]) -> dict[str, Any]:
    """The config this process redacted into `config`, or `config` itself (a run from the UI)."""
    full = _UNREDACTED.get()
    return full if full is not None and redact_secrets(full) == config else config


@flow(name="pretraining-pipeline", log_prints=True)
def pipeline_flow(config: dict[str, Any], until: str = "finetune") -> dict[str, Any]:
    """Tokenizer -> shards -> pretrain -> finetune, each reused when its inputs are unchanged.

    `until` stops after that stage (a stage deployment): the stages before it are computed or,
    through the content-addressed store, reused.
    """
    if until not in STAGES:
        raise ConfigError(f"until={until!r} must be one of {STAGES}")
    config = unredacted(config)
    run = load_run_config(config)
    plan = PipelinePlan.from_run_config(run)
    corpus = open_corpus(plan.corpus)  # a missing path or empty glob fails here, before tracking
    if until == "finetune":  # deployment runs skip the CLI: task files are checked here too
        plan.finetune.check_task_files(run.seed)
    paths = RunPaths.from_settings(run.paths)
    store = ArtifactStore(paths.artifacts)
    tracker = Tracker.for_run(plan.tracking, paths)
    teacher: ArtifactRef | None = None
    if plan.distill is not None and plan.distill.distill.external_teacher:
        # Resolved and checked now: a bad teacher fails before any stage spends time.
        teacher, tokenizer = external_teacher(
            plan.distill.distill, plan.tokenizer, store, tracker.resolve_model_uri
        )
        plan = replace(plan, tokenizer=tokenizer)
    tracker.close_stale_runs()
    parent = tracker.start_run(
        "pipeline",
        tags={
            "cloze.model": str(plan.pretrain.model.get("name")),
            "cloze.corpus": plan.corpus.kind,
        },
    )
    loggable = redact_secrets(config)
    parent.log_params(loggable)
    parent.log_text(to_yaml(loggable), "config.yaml")
    ctx = StageContext(plan, store, tracker, parent)
    try:
        wanted = STAGES[: STAGES.index(until) + 1]
        refs = {"tokenizer": tokenizer_task(ctx, corpus)}
        if "shards" in wanted:
            refs["shards"] = shards_task(ctx, corpus, refs["tokenizer"])
        if "pretrain" in wanted:
            refs["pretrain"] = teacher or pretrain_task(ctx, refs["shards"], refs["tokenizer"])
        if "distill" in wanted and plan.distill is not None:
            refs["distill"] = distill_task(ctx, refs["pretrain"], refs["shards"], refs["tokenizer"])
        if "finetune" in wanted:
            refs["finetune"] = finetune_task(
                ctx, refs["pretrain"], refs["tokenizer"], refs.get("distill")
            )
        # Only asked-for curves become a task: each task run is a round of Prefect API calls.
        if "finetune" in wanted and plan.finetune.curve_fractions:
            refs["lift_curve"] = lift_curve_task(ctx, dict(refs))
    except BaseException as error:
        parent.finish(final_status(error))
        raise
    summary = build_summary(refs, tracker.tracking_uri, parent.run_id, plan.tracking.experiment)
    parent.log_metrics(
        {
            f"{stage}.{name}": value
            for stage, outputs in summary["stages"].items()
            for name, value in outputs.items()
        }
    )
    parent.finish()
    if until == STAGES[-1]:
        print(render_summary(summary))
    return summary
