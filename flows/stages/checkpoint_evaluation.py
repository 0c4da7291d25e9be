"""`cloze evaluate`'s stage: a checkpoint as it is, against random init, on the tasks.

Before any pretraining a team asks how good a public checkpoint is on its own tasks. This stage
answers with the two arms a continuation of that checkpoint would fit anyway: `base` (the
imported checkpoint, on the grid for pretrained encoders) and `random_init`, each fetched through
the store under the very records the finetune stage uses (flows/stages/control_arm.py). So a
later continuation of the same checkpoint on the same tasks and seed reuses both arms, and an
evaluation after a continuation fits nothing.

Its artifact is a finetune artifact (stage `finetune`, the same flat outputs), so the summary,
MLflow and Prefect show it as a run's finetune stage. Its `pretrained` arm is the checkpoint as
it is, its lift the checkpoint's own over random init; `evaluated_checkpoint` names the folder
and tells the summary to say `base`. Its key holds the checkpoint and the tokenizer in place of a
pretrain artifact, so it never collides with a pipeline's. Everything else is the finetune
stage's: each task's `evaluate_task` (flows/downstream/evaluate.py), the resuming, the writing.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.downstream.finetuning.cached_arm import CachedArm
from flows.downstream.finetuning.recipe import LoggerFactory
from flows.downstream.settings import FinetuneSettings, TaskPlan
from flows.downstream.statistics.task_figures import EVALUATED
from flows.downstream.tasks.spec import ARMS, BASE_ARM
from flows.stages.control_arm import CONTROL_ARM, StoredArms
from flows.stages.finetune import (
    STAGE,
    checkpoint_grids,
    stage_settings,
    stage_sources,
    write_artifact,
)
from flows.stages.finetune_progress import evaluate_tasks
from flows.training.settings import TrainerSettings

VERSION = 3


def evaluate_checkpoint(
    settings: FinetuneSettings,
    seed: int,
    trainer_settings: TrainerSettings,
    checkpoint_ref: ArtifactRef,
    tokenizer_ref: ArtifactRef,
    store: ArtifactStore,
    loggers_for: LoggerFactory = lambda task, label: (),
) -> ArtifactRef:
    """Each task's base and random-init arms (cached, shared with continuations), its
    baselines, and the checkpoint's lift over random init with both intervals."""
    record: dict[str, Any] = {
        "settings": {
            **stage_settings(settings, seed, trainer_settings),
            "checkpoint_grids": checkpoint_grids(settings),
        },
        "inputs": {"checkpoint": checkpoint_ref.key, "tokenizer": tokenizer_ref.key},
    }
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])
    task_keys = record["settings"]["specs"]  # each task's part of the key: its arms' too
    weights = checkpoint_ref.path

    def build(directory: Path) -> dict[str, Any]:
        outputs: dict[str, Any] = {
            "tasks": list(settings.tasks),
            "confidence": settings.confidence,
            EVALUATED: checkpoint_ref.outputs.get("name", checkpoint_ref.key),
        }
        work_dir = store.work_dir(STAGE, key)
        sources = stage_sources(
            settings, seed, trainer_settings, tokenizer_ref, weights, work_dir, loggers_for
        )
        # Both arms only: the pretrained one is the checkpoint's base arm, tuned as a checkpoint.
        sources = replace(sources, base_dir=weights, arms=ARMS)
        stored = StoredArms(
            store, task_keys, seed, trainer_settings, tokenizer_ref, sources.encoder, checkpoint_ref
        )

        def cached(task: TaskPlan) -> dict[str, CachedArm]:
            arms = stored.of(task)
            return {"pretrained": arms[BASE_ARM], CONTROL_ARM: arms[CONTROL_ARM]}

        runs, predictions = evaluate_tasks(settings, sources, cached, outputs)
        before = (
            f"Checkpoint {outputs[EVALUATED]} as it is: the `pretrained` column is its base "
            "arm, the lift its own over random init.\n\n"
        )
        write_artifact(directory, outputs, runs, predictions, settings.confidence, before)
        return outputs

    return store.get_or_build(STAGE, key, build, record)
