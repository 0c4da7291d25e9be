"""The `pretraining-pipeline` Prefect flow: wiring only.

Each stage runs as a Prefect task inside its own MLflow child run under the pipeline's parent run;
the stage functions themselves know nothing of either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.artifacts import ArtifactRef, ArtifactStore
from flows.config import to_yaml
from flows.corpora import Corpus, CorpusSettings, open_corpus
from flows.environment import RunPaths
from flows.settings import settings_from
from flows.stages.finetune import FinetuneSettings, finetune
from flows.stages.pretrain import HUGGINGFACE_DIR, PretrainSettings, pretrain
from flows.stages.shards import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, train_tokenizer
from flows.summary import build_summary, render_summary
from flows.tracking import RunHandle, Tracker, TrackingSettings, redact_secrets
from flows.unit_runners import prefect_unit_mapper


@dataclass(frozen=True)
class PipelinePlan:
    """Every stage's settings, validated before any stage starts."""

    corpus: CorpusSettings
    tokenizer: TokenizerSettings
    shards: ShardSettings
    pretrain: PretrainSettings
    finetune: FinetuneSettings
    tracking: TrackingSettings

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PipelinePlan:
        return cls(
            settings_from(CorpusSettings, config["corpus"], "corpus"),
            settings_from(TokenizerSettings, config["tokenizer"], "tokenizer"),
            settings_from(ShardSettings, config["shards"], "shards"),
            PretrainSettings.from_config(config),
            FinetuneSettings.from_config(config),
            settings_from(TrackingSettings, config["tracking"], "tracking"),
        )


@dataclass(frozen=True)
class StageContext:
    """What every stage task needs beside its inputs: the plan, the store and the parent run."""

    plan: PipelinePlan
    store: ArtifactStore
    tracker: Tracker
    parent: RunHandle

    def tracked(self, stage: str, produce: Callable[[RunHandle], ArtifactRef]) -> ArtifactRef:
        """Runs `produce` inside a child run that records the artifact, computed or reused."""
        run = self.tracker.start_run(stage, self.parent, tags={"cloze.stage": stage})
        try:
            ref = produce(run)
        except BaseException:
            run.finish("FAILED")
            raise
        run.record_artifact(ref)
        run.finish()
        return ref


@task(name="tokenizer", cache_policy=NO_CACHE)
def tokenizer_task(ctx: StageContext, corpus: Corpus) -> ArtifactRef:
    return ctx.tracked(
        "tokenizer", lambda run: train_tokenizer(ctx.plan.tokenizer, corpus, ctx.store)
    )


@task(name="shards", cache_policy=NO_CACHE)
def shards_task(ctx: StageContext, corpus: Corpus, tokenizer: ArtifactRef) -> ArtifactRef:
    settings = ctx.plan.shards
    return ctx.tracked(
        "shards",
        lambda run: build_shards(
            settings, corpus, tokenizer, ctx.store, prefect_unit_mapper(settings)
        ),
    )


@task(name="pretrain", cache_policy=NO_CACHE)
def pretrain_task(ctx: StageContext, shards: ArtifactRef, tokenizer: ArtifactRef) -> ArtifactRef:
    def pretrain_and_publish(run: RunHandle) -> ArtifactRef:
        ref = pretrain(ctx.plan.pretrain, shards, tokenizer, ctx.store, [run.lightning_logger()])
        export = ref.path / HUGGINGFACE_DIR
        if not ref.cache_hit and export.is_dir():
            run.log_artifacts(export, HUGGINGFACE_DIR)
            name = ctx.plan.tracking.registered_model
            if name:
                version = ctx.tracker.register_model(name, run, HUGGINGFACE_DIR)
                run.set_tags({"cloze.registered_model": f"{name}/{version}"})
        return ref

    return ctx.tracked("pretrain", pretrain_and_publish)


@task(name="finetune", cache_policy=NO_CACHE)
def finetune_task(
    ctx: StageContext, pretrained: ArtifactRef, tokenizer: ArtifactRef
) -> ArtifactRef:
    plan = ctx.plan
    return ctx.tracked(
        "finetune",
        lambda run: finetune(
            plan.finetune,
            plan.pretrain.seed,
            plan.pretrain.trainer,
            pretrained,
            tokenizer,
            ctx.store,
            lambda arm: [run.lightning_logger(prefix=arm)],
        ),
    )


@flow(name="pretraining-pipeline", log_prints=True)
def pretraining_pipeline(config: dict[str, Any]) -> dict[str, Any]:
    """Tokenizer -> shards -> pretrain -> finetune, each reused when its inputs are unchanged."""
    plan = PipelinePlan.from_config(config)
    corpus = open_corpus(plan.corpus)  # a missing path or empty glob fails here, before tracking
    paths = RunPaths.from_config(config)
    store = ArtifactStore(paths.artifacts)
    tracking_uri = paths.tracking_uri(plan.tracking.uri)
    experiment = plan.tracking.experiment
    tracker = Tracker(
        tracking_uri,
        experiment,
        paths.mlflow_artifacts if tracking_uri.startswith("sqlite:") else None,
    )
    parent = tracker.start_run(
        "pipeline", tags={"cloze.model": config["model"]["name"], "cloze.corpus": plan.corpus.kind}
    )
    loggable = redact_secrets(config)
    parent.log_params(loggable)
    parent.log_text(to_yaml(loggable), "config.yaml")
    ctx = StageContext(plan, store, tracker, parent)
    try:
        refs = {"tokenizer": tokenizer_task(ctx, corpus)}
        refs["shards"] = shards_task(ctx, corpus, refs["tokenizer"])
        refs["pretrain"] = pretrain_task(ctx, refs["shards"], refs["tokenizer"])
        refs["finetune"] = finetune_task(ctx, refs["pretrain"], refs["tokenizer"])
    except BaseException:
        parent.finish("FAILED")
        raise
    summary = build_summary(refs, tracking_uri, parent.run_id, experiment)
    parent.log_metrics(
        {
            f"{stage}.{name}": value
            for stage, outputs in summary["stages"].items()
            for name, value in outputs.items()
        }
    )
    parent.finish()
    print(render_summary(summary))
    return summary
