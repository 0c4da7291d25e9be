"""The `domain-refresh` flow: continued pretraining on what a growing corpus gained since last time.

One run: fingerprint the corpus files against the manifest of the last successful run; shard
only the new and changed files, with the tokenizer of the model we continue from (the vocabulary
must not move under trained embeddings); continue pretraining from the domain's `champion`
(MLflow registry alias), or on the first run from `pretrain.init_from` (a public checkpoint, then
the `base` arm the challenger must not fall below); fine-tune challenger and champion with the
same recipe; register the
result as `challenger` and promote it to `champion` only if it wins by `refresh.margin`. The
manifest moves forward only when all of that succeeded. One refresh of a domain runs at a time
(a lock beside its manifest): a second one waits, then sees what the first recorded. Wiring only:
the stages are the pipeline's own tasks, so caching, tracking and Prefect options are the same.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import State

from flows.core.artifacts import MANIFEST_FILE, ArtifactRef, ArtifactStore, file_lock
from flows.core.paths import RunPaths
from flows.core.settings import ConfigError
from flows.core.tables import markdown_table
from flows.corpora.base import Corpus
from flows.corpora.file_source import resolve_paths
from flows.downstream.statistics.base_report import is_worse_than_base
from flows.orchestration.flow_runs import (
    EXPECTED_ERRORS,
    read_form,
    refused,
    resolve_form,
    run_name,
)
from flows.orchestration.registry import CHALLENGER, CHAMPION
from flows.orchestration.run_form import NO_EXPERIMENT, Experiment, described_by_form
from flows.pipeline import (
    StageContext,
    checkpoint_task,
    finetune_task,
    pretrain_task,
    shards_task,
    tokenizer_task,
)
from flows.plan import PipelinePlan, RefreshSettings, RunConfig
from flows.refresh.fingerprints import (
    CorpusChanges,
    compare,
    fingerprint_files,
    load_manifest,
    save_manifest,
)
from flows.refresh.promotion import Forgetting, decide, metric_value
from flows.resolve import ResolvedRun
from flows.stages.init_point import SCRATCH, InitPoint
from flows.stages.shards.stage import ShardOutputs
from flows.stages.tokenizer import reused_tokenizer
from flows.stages.training_types import PretrainOutputs
from flows.tracking.links import current_identity
from flows.tracking.prefect_logs import report_progress_to_prefect
from flows.tracking.run_config import log_config
from flows.tracking.runs import Tracker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartingPoint:
    """The weights a refresh continues, the tokenizer it must keep, and what scores them."""

    init: InitPoint
    tokenizer: ArtifactRef
    champion: ArtifactRef | None = None  # the champion's pretrain artifact, fine-tuned beside
    version: str | None = None  # the champion's registry version
    base: ArtifactRef | None = None  # an imported checkpoint: the challenger's `base` arm


def published_pretrain(path: Path) -> ArtifactRef:
    """The pretrain artifact at `path`, read by the store it lives in (`<root>/pretrain/<key>`)."""
    found = (
        ArtifactStore(path.parents[1]).lookup(path.parent.name, path.name)
        if (path / MANIFEST_FILE).is_file()
        else None
    )
    if found is None or found.stage != "pretrain":
        raise ConfigError(f"{path} is not a published pretrain artifact (no {MANIFEST_FILE})")
    return found


def champion_start(tracker: Tracker, store: ArtifactStore, name: str) -> StartingPoint | None:
    """The registered model `name`'s champion with its tokenizer; None before the first one."""
    champion = tracker.version_by_alias(name, CHAMPION)
    if champion is None:
        return None
    pretrained = published_pretrain(tracker.resolve_model_uri(f"models:/{name}@{CHAMPION}"))
    tokenizer = reused_tokenizer(str(pretrained.path), store)  # the vocabulary must not move
    return StartingPoint(
        InitPoint.of_artifact(pretrained.path), tokenizer, pretrained, champion.version
    )


def first_start(ctx: StageContext, corpus: Corpus) -> StartingPoint:
    """Where a domain's first refresh starts: `pretrain.init_from`, as a pipeline run would.

    From scratch, with a tokenizer trained on the corpus; a pretrain artifact (or the `models:/`
    URI it was given as) with its own tokenizer; or a `transformers` checkpoint, imported with
    its tokenizer and kept as the `base` arm, so a first challenger that continuing made worse
    than the checkpoint is not promoted.
    """
    init = ctx.plan.init
    if init.kind == "artifact" and init.weights is not None:
        pretrained = published_pretrain(init.weights)
        return StartingPoint(init, reused_tokenizer(str(pretrained.path), ctx.store))
    tokenizer = tokenizer_task(ctx, corpus)
    if ctx.plan.checkpoint is None:
        return StartingPoint(SCRATCH, tokenizer)
    base, imported = checkpoint_task(ctx, tokenizer)
    return StartingPoint(imported, tokenizer, base=base)


def without_head_warmup(plan: PipelinePlan) -> PipelinePlan:
    """`plan` continuing a champion: its MLM head is trained, so no step trains it alone (a
    checkpoint without a head gave the first refresh `pretrain.head_warmup_steps`)."""
    if not plan.pretrain.head_warmup_steps:
        return plan
    log.info(
        "pretrain.head_warmup_steps=%d set aside: the champion's MLM head is trained",
        plan.pretrain.head_warmup_steps,
    )
    return replace(plan, pretrain=replace(plan.pretrain, head_warmup_steps=0))


def refresh_models(
    ctx: StageContext, refresh: RefreshSettings, changes: CorpusChanges
) -> dict[str, Any]:
    """Shards the new files, trains the challenger, scores both, moves the aliases."""
    corpus = ctx.plan.open_corpus(ctx.plan.corpus.model_copy(update={"paths": changes.to_train}))
    start = champion_start(ctx.tracker, ctx.store, refresh.model_name)
    if start is None:
        start = first_start(ctx, corpus)
    else:
        ctx = replace(ctx, plan=without_head_warmup(ctx.plan))
    shards = shards_task(ctx, corpus, start.tokenizer)
    pretrained = pretrain_task(ctx, shards, start.tokenizer, start.init)
    version = ctx.tracker.version_for_artifact(refresh.model_name, pretrained.key)
    if version is None:
        raise ConfigError(
            f"the challenger ({pretrained.path}) has no version of {refresh.model_name} in the "
            "registry; domain-refresh needs a model with a Hugging Face export (post-LN)"
        )
    ctx.tracker.set_alias(refresh.model_name, CHALLENGER, version.version)
    challenger_ref = finetune_task(
        ctx, pretrained, start.tokenizer, label="finetune-challenger", base=start.base
    )
    challenger = metric_value(challenger_ref.outputs, refresh.metric)
    champion = (
        None
        if start.champion is None
        else metric_value(
            finetune_task(ctx, start.champion, start.tokenizer, label="finetune-champion").outputs,
            refresh.metric,
        )
    )
    worse = tuple(
        task
        for task in challenger_ref.outputs.get("tasks", [])
        if is_worse_than_base(challenger_ref.outputs, task)
    )
    forgetting = general_forgetting(pretrained, refresh) if start.init != SCRATCH else None
    decision = decide(
        challenger, champion, refresh.margin, refresh.higher_is_better, worse, forgetting
    )
    if decision.promote:
        ctx.tracker.set_alias(refresh.model_name, CHAMPION, version.version)
    label = "promoted" if decision.promote else "kept-champion"
    ctx.tracker.describe_version(
        refresh.model_name,
        version.version,
        {
            "cloze.refresh.decision": label,
            "cloze.refresh.metric": refresh.metric,
            "cloze.refresh.score": f"{decision.challenger_score:.6g}",
        }
        | ({} if champion is None else {"cloze.refresh.champion_score": f"{champion:.6g}"}),
        f"Refresh {ctx.tracker.identity.name or ''}: {label} ({decision.reason}); "
        f"{refresh.metric} {decision.challenger_score:.4g} against the champion's "
        + ("(none)" if champion is None else f"{decision.champion_score:.4g}"),
    )
    return {
        "decision": "promoted" if decision.promote else "kept-champion",
        "reason": decision.reason,
        "challenger_score": decision.challenger_score,
        "champion_score": decision.champion_score,
        "challenger_version": version.version,
        "champion_version": version.version if decision.promote else start.version,
        "previous_champion_version": start.version,
        "continued_from": "random init" if start.init.path is None else str(start.init.path),
        "shards_key": shards.key,
        "train_documents": ShardOutputs.of(shards).train_documents,
        **general_losses(pretrained, forgetting),
    }


def general_forgetting(pretrained: ArtifactRef, refresh: RefreshSettings) -> Forgetting | None:
    """The general validation loss before the challenger's first step (the weights it continued)
    and after its last, when `pretrain.general_validation` measured it."""
    outputs = PretrainOutputs.of(pretrained)
    before = outputs.before.get("val_general_loss")
    if before is None:
        return None
    interval = outputs.general_change_interval
    return Forgetting(
        before,
        outputs.validation["val_general_loss"],
        refresh.max_general_loss_increase,
        None if interval is None else (interval["loss_low"], interval["loss_high"]),
    )


def general_losses(pretrained: ArtifactRef, forgetting: Forgetting | None) -> dict[str, float]:
    """The report's general validation losses: the challenger's whenever measured, the model's
    it continued (the champion, or the base model on a first run) beside it."""
    if forgetting is not None:
        losses = {
            "champion_general_loss": forgetting.before,
            "challenger_general_loss": forgetting.after,
        }
        if forgetting.interval is not None:
            low, high = forgetting.interval
            losses |= {"general_loss_increase_low": low, "general_loss_increase_high": high}
        return losses
    general = PretrainOutputs.of(pretrained).validation.get("val_general_loss")
    return {} if general is None else {"challenger_general_loss": general}


def domain_dir(run: RunConfig, domain: str) -> Path:
    """Where a domain's manifest and lock live, beside the artifacts its refreshes publish."""
    return RunPaths.from_settings(run.paths).artifacts / "domains" / domain


def scan(run: RunConfig, domain: str) -> tuple[Path, CorpusChanges]:
    """The manifest's path and what changed since it was written."""
    if run.corpus.kind != "files":
        raise ConfigError(
            "domain-refresh needs corpus=files with corpus.paths pointing at the growing corpus "
            f"(corpus.kind={run.corpus.kind!r})"
        )
    manifest = domain_dir(run, domain) / "fingerprints.json"
    previous = load_manifest(manifest)
    files = resolve_paths(list(run.corpus.paths))
    return manifest, compare(previous, fingerprint_files(files, previous))


def refresh_markdown(domain: str, metric: str, result: dict[str, Any], mlflow_url: str) -> str:
    lines = [f"# Domain refresh: {domain}", "", f"**{result['decision']}**: {result['reason']}", ""]
    lines += [f"MLflow run: [{result['mlflow_run_id']}]({mlflow_url})", ""]
    figures = [(key, value) for key, value in result.items() if key != "sharded_files"]
    lines.append(markdown_table(["", ""], figures))
    lines += ["", f"Promotion metric: `{metric}` (finetune output).", "", "Sharded files:"]
    lines += [f"- `{name}`" for name in result["sharded_files"]] or ["- none"]
    return "\n".join(lines)


def record(parent: Any, result: dict[str, Any]) -> None:
    """The decision and both scores on the refresh's MLflow run."""
    parent.set_tags(
        {f"cloze.refresh.{key}": value for key, value in result.items() if key != "sharded_files"}
    )
    parent.log_metrics(
        {
            f"refresh.{key}": result[key]
            for key in (
                "challenger_score",
                "champion_score",
                "challenger_general_loss",
                "champion_general_loss",
                "general_loss_increase_low",
                "general_loss_increase_high",
                "new_files",
                "changed_files",
            )
            if result.get(key) is not None
        }
    )
    parent.log_text("\n".join(result["sharded_files"]), "sharded_files.txt")


@contextmanager
def one_refresh_at_a_time(run: RunConfig, domain: str) -> Iterator[None]:
    """Holds the domain's lock from the scan to the manifest's update. Two refreshes of one
    domain at once both saw no champion, trained on the same files and both "promoted"; the
    second now waits, then finds the files recorded and the champion set."""
    lock = domain_dir(run, domain) / "refresh.lock"

    def waiting() -> None:
        get_run_logger().info(
            "domain %s: another refresh of this domain is running; waiting for it to end (lock %s)",
            domain,
            lock,
        )

    with file_lock(lock, waiting):
        yield


@flow(name="domain-refresh", flow_run_name=run_name, log_prints=True)
@described_by_form
def domain_refresh(
    experiment: Experiment = NO_EXPERIMENT,
    overrides: list[str] = [],  # noqa: B006 (the default the UI shows; never mutated)
) -> dict[str, Any] | State:
    """One refresh of `refresh.domain`; a run without new or changed files trains nothing."""
    report_progress_to_prefect()
    try:
        resolved = resolve_form(read_form(experiment=experiment, overrides=overrides))
        run = resolved.run
        domain = run.refresh.require_domain()
        with one_refresh_at_a_time(run, domain):
            return refresh_domain(resolved, domain)
    except EXPECTED_ERRORS as error:
        return refused(error)


def refresh_domain(resolved: ResolvedRun, domain: str) -> dict[str, Any]:
    """Scan, train and decide if anything changed, record, and move the manifest forward."""
    run = resolved.run
    refresh = run.refresh
    manifest, changes = scan(run, domain)
    print(f"domain {domain}: {changes.describe()}")
    paths = RunPaths.from_settings(run.paths)
    tracker = Tracker.for_run(run.tracking, paths)
    if resolved.registry_uri is not None:  # `pretrain.init_from=models:/...`: only it can look up
        resolved = resolved.from_registry(tracker.resolve_model_uri)
    base = PipelinePlan.from_run_config(resolved.run, init=resolved.init)
    tracking = base.tracking.model_copy(update={"registered_model": refresh.model_name})
    plan = replace(base, tracking=tracking)
    tracker.identity = current_identity()
    parent = tracker.start_run("domain-refresh", tags={"cloze.refresh.domain": domain})
    log_config(parent, resolved.config)
    try:
        if changes.to_train:
            ctx = StageContext(
                plan, ArtifactStore(paths.artifacts), tracker, parent, first_version_champion=False
            )
            result = refresh_models(ctx, refresh, changes)
        else:
            result = {
                "decision": "no-new-data",
                "reason": "no new or changed files; nothing trained",
            }
        result |= {
            "new_files": len(changes.new),
            "changed_files": len(changes.changed),
            "removed_files": len(changes.removed),
            "sharded_files": changes.to_train,
            "mlflow_run_id": parent.run_id,
        }
        record(parent, result)
    except BaseException:
        parent.finish("FAILED")
        raise
    save_manifest(manifest, changes.current)  # only now: a failed run sees the same files again
    parent.finish()
    create_markdown_artifact(
        refresh_markdown(domain, refresh.metric, result, tracker.run_url(parent.run_id)),
        key=f"domain-refresh-{domain.lower().replace('_', '-')}",
        description="Domain refresh: files, scores and the promotion decision",
    )
    print(f"domain {domain}: {result['decision']} ({result['reason']})")
    return result
