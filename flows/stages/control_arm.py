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

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.downstream.finetuning.recipe import ArmResult, TaskRun, evaluate_arm
from flows.downstream.tasks.spec import BASE_ARM
from flows.training.settings import TrainerSettings
from lightning_modules.models.config import EncoderConfig

CONTROL_STAGE = "finetune_control"
BASE_STAGE = "finetune_base"
VERSION = 3
CONTROL_ARM = "random_init"
ARM_STAGES = {CONTROL_ARM: CONTROL_STAGE, BASE_ARM: BASE_STAGE}
ARM_FILE = "arm.json"  # the ArmResult, every run's test predictions included (bootstrap input)


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


def read_control(ref: ArtifactRef) -> ArmResult:
    return ArmResult.from_record(json.loads((ref.path / ARM_FILE).read_text()))


def base_record(
    control: dict[str, Any], checkpoint_ref: ArtifactRef, grid: dict[str, Any]
) -> dict[str, Any]:
    """The base arm's runs depend on what the control's do but its grid (the one for
    pretrained encoders, `grid`), and on the checkpoint's weights."""
    return {
        "settings": {**control["settings"], "grid": grid},
        "inputs": {**control["inputs"], "checkpoint": checkpoint_ref.key},
    }


def cached_arm(
    task_run: TaskRun,
    arm: str,
    seeds: list[int],
    record: dict[str, Any],
    store: ArtifactStore,
) -> ArmResult:
    """`arm` (random_init or base) of `task_run` over `seeds`, fitted only when no run of the
    same `record` (control_record, base_record) has published it."""
    stage = ARM_STAGES[arm]
    key = stage_key(stage, VERSION, record["settings"], record["inputs"])

    def build(directory: Path) -> dict[str, Any]:
        run = replace(task_run, work_dir=store.work_dir(stage, key))
        result = evaluate_arm(run, arm, seeds)
        (directory / ARM_FILE).write_text(json.dumps(asdict(result)))
        return {"task": task_run.spec.name, "learning_rate": result.learning_rate}

    return read_control(store.get_or_build(stage, key, build, record))
