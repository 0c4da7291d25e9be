"""The model registry as a run publishes to it: a freshly trained model's export logged and
registered as a version, with the text that says what the version is.

The pipeline's pretrain and distill stages publish through here; the domain refresh moves the
aliases named here on its own rule (flows/refresh/promotion.py `decide`).
"""

from __future__ import annotations

import logging

from flows.core.artifacts import ArtifactRef
from flows.plan import PipelinePlan
from flows.stages.init_point import InitPoint
from flows.stages.init_source import HUGGINGFACE_DIR
from flows.stages.shards.stage import ShardOutputs
from flows.stages.training_types import PretrainOutputs
from flows.tracking.links import corpus_label
from flows.tracking.runs import ARTIFACT_KEY_TAG, ARTIFACT_PATH_TAG, RunHandle, Tracker

log = logging.getLogger(__name__)
# The aliases a registered model's versions move between: `distill`'s default teacher names
# `@champion`; the domain refresh registers `@challenger` and promotes it.
CHAMPION = "champion"
CHALLENGER = "challenger"


def publish_model(
    tracker: Tracker,
    parent: RunHandle,
    run: RunHandle,
    ref: ArtifactRef,
    name: str | None,
    description: str,
    first_version_champion: bool = True,
) -> None:
    """Logs a freshly trained model's Hugging Face export on `run`; registers it under `name` if
    given, the first version as `@champion` (unless `first_version_champion` is off: the domain
    refresh moves that alias itself), and tags the `parent` run with the version too (the
    pipeline's run is the one a person opens)."""
    export = ref.path / HUGGINGFACE_DIR
    if ref.cache_hit or not export.is_dir():
        return
    run.log_artifacts(export, HUGGINGFACE_DIR)  # tokenizer.json travels in it
    if name:
        version = tracker.register_model(
            name,
            run,
            HUGGINGFACE_DIR,
            {ARTIFACT_KEY_TAG: ref.key, ARTIFACT_PATH_TAG: str(ref.path)},
            description,
        )
        registered = {"cloze.registered_model": f"{name}/{version}"}
        if first_version_champion and tracker.version_by_alias(name, CHAMPION) is None:
            tracker.set_alias(name, CHAMPION, version)
            log.info("registered %s version %s as models:/%s@%s", name, version, name, CHAMPION)
        run.set_tags(registered)
        parent.set_tags(registered)


def version_description(
    plan: PipelinePlan, start: InitPoint, shards: ArtifactRef, ref: ArtifactRef
) -> str:
    """What a registry version is: its data, its recipe, where it started (`start`, the
    pretraining's) and its held-out scores."""
    data, outputs = ShardOutputs.of(shards), PretrainOutputs.of(ref)
    settings = plan.pretrain
    return "\n".join(
        [
            f"Data: {corpus_label(plan.corpus.model_dump())} ({plan.corpus.kind}), "
            f"{data.train_documents:,} documents, {data.train_tokens:,} training tokens "
            f"(shards {shards.key}).",
            f"Recipe: model {settings.model.name}, objective {settings.objective.name}, "
            f"{outputs.steps:,} steps over {outputs.train_tokens:,} tokens, seed {settings.seed}, "
            f"{start.describe()}.",
            f"Scores: validation loss {outputs.initial_val_loss:.3f} -> {outputs.val_loss:.3f}"
            + "".join(
                f", {name} {value:.4g}"
                for name, value in sorted(outputs.validation.items())
                if name != "val_loss"
            )
            + ".",
        ]
    )


def distilled_description(teacher: str, ref: ArtifactRef) -> str:
    """What a distilled student's registry version is: the teacher it learned from."""
    return (
        f"Student distilled from teacher {teacher} "
        f"(distill artifact {ref.key}); see the run's distill metrics for its scores."
    )
