"""A task's random-init arm (and a continued checkpoint's `base` arm) as artifacts of their own.

Random init reads nothing of pretraining but the encoder's shape and the vocabulary: its runs
depend on the task (spec, recipe, data), the seeds, the tokenizer and the architecture, and on
nothing the pretrained weights hold. Keyed by exactly those, one arm serves every encoder it can
control: `flows.lift`'s general and domain-continued models, a scheduled re-pretraining on
new data, a recipe sweep. Each is then fitted once per store instead of once per pretraining run,
and two lifts against it pair by seed with the very same control runs.

The `base` arm (an imported checkpoint fine-tuned as it was) is cached the same way, keyed also
by the checkpoint: a second adaptation of the same checkpoint, on other text or with another
recipe, pairs with the same base runs instead of refitting them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.downstream.finetuning.cached_arm import CachedArm
from flows.downstream.settings import TaskPlan
from flows.downstream.tasks.spec import BASE_ARM
from flows.training.settings import TrainerSettings
from lightning_modules.models.config import EncoderConfig

CONTROL_STAGE = "finetune_control"
BASE_STAGE = "finetune_base"
VERSION = 3
CONTROL_ARM = "random_init"
ARM_STAGES = {CONTROL_ARM: CONTROL_STAGE, BASE_ARM: BASE_STAGE}


def control_record(
    task: dict[str, Any],
    seed: int,
    trainer: TrainerSettings,
    encoder: EncoderConfig,
    tokenizer_ref: ArtifactRef,
) -> dict[str, Any]:
    """What the control's runs depend on: `task` is the task's part of the finetune key."""
    return {
        "settings": {
            "task": task,
            "seed": seed,
            "precision": trainer.precision,
            "grad_clip": trainer.grad_clip,
            "encoder": asdict(encoder),
        },
        "inputs": {"tokenizer": tokenizer_ref.key},
    }


def base_record(
    control: dict[str, Any], checkpoint_ref: ArtifactRef, grid: dict[str, Any]
) -> dict[str, Any]:
    """The base arm's runs depend on what the control's do but its grid (the one for
    pretrained encoders, `grid`), and on the checkpoint's weights."""
    return {
        "settings": {**control["settings"], "grid": grid},
        "inputs": {**control["inputs"], "checkpoint": checkpoint_ref.key},
    }


def arm_cache(arm: str, record: dict[str, Any], store: ArtifactStore) -> CachedArm:
    """Where `arm` (random_init or base) of a task is published under `record` (control_record,
    base_record): fitted only when no run of the same record has published it."""
    stage = ARM_STAGES[arm]
    key = stage_key(stage, VERSION, record["settings"], record["inputs"])
    return CachedArm(arm, store, stage, key, record)


@dataclass(frozen=True)
class StoredArms:
    """Where a stage's tasks find their arms fitted once per store: each task's control, and
    with `checkpoint_ref` the checkpoint's base arm on the task's grid for pretrained encoders."""

    store: ArtifactStore
    task_keys: dict[str, Any]  # each task's part of the stage's key: its arms' too
    seed: int
    trainer: TrainerSettings
    tokenizer_ref: ArtifactRef
    encoder: EncoderConfig
    checkpoint_ref: ArtifactRef | None = None

    def of(self, task: TaskPlan) -> dict[str, CachedArm]:
        name = task.spec.name
        control = control_record(
            self.task_keys[name], self.seed, self.trainer, self.encoder, self.tokenizer_ref
        )
        arms = {CONTROL_ARM: arm_cache(CONTROL_ARM, control, self.store)}
        if self.checkpoint_ref is not None:
            base = base_record(control, self.checkpoint_ref, task.recipe.checkpoint_grid())
            arms[BASE_ARM] = arm_cache(BASE_ARM, base, self.store)
        return arms
