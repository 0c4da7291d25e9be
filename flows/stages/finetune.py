"""Downstream evaluation, from the pretrained encoder and from random init.

Every task in `finetune.tasks` runs both arms with one recipe over `finetune.seeds` seeds, each arm
with its own learning rate and epoch chosen on validation (flows/downstream/finetuning/recipe.py),
beside baselines without an encoder (flows/downstream/finetuning/baselines.py). The lift gets a
paired t-interval over seeds and a paired bootstrap interval over test examples. The outputs are
flat `<task>.<key>` figures; `summary.md`, `lift.png` and `results.json` (every run) are written
into the artifact.

Here: the keying, caching and writing, which `cloze evaluate`'s stage shares; each task's
evaluation is flows/downstream/evaluate.py's `evaluate_task`, called once per task by
`evaluate_tasks` (finetune_progress.py), which resumes a stopped run's finished tasks.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.core.settings import output_settings
from flows.downstream.evaluate import Sources, kind_sections
from flows.downstream.finetuning.recipe import LoggerFactory
from flows.downstream.kinds.registry import kind_of
from flows.downstream.settings import RECIPE_FIELDS, FinetuneSettings, TaskPlan
from flows.downstream.statistics.distill_report import distillation_table
from flows.downstream.statistics.report import bar_chart, markdown_table
from flows.downstream.statistics.speed import measure_sizes
from flows.downstream.tasks.load import source_fingerprint
from flows.stages.control_arm import StoredArms
from flows.stages.finetune_progress import evaluate_tasks
from flows.stages.tokenizer import load_tokenizer
from flows.stages.training_types import FinetuneOutputs
from flows.training.settings import TrainerSettings
from lightning_modules.models.config import load_encoder_config

STAGE = FinetuneOutputs.STAGE
VERSION = 7
SUMMARY_FILE = "summary.md"
CHART_FILE = "lift.png"
RESULTS_FILE = "results.json"
PREDICTIONS_FILE = "predictions.json"  # test predictions per task, arm and seed: bootstrap input


def task_settings(task: TaskPlan, data_dir: Path) -> dict[str, Any]:
    """What changes one task's runs: its spec, its recipe (less what its head ignores) and the
    content of its data files."""
    spec, recipe = task.spec, task.recipe
    return {
        **spec.key_record(),
        "recipe": recipe.key_record(kind_of(spec.kind).unused_fields(recipe)),
        "data": source_fingerprint(spec, data_dir),
    }


def stage_settings(
    settings: FinetuneSettings, seed: int, trainer: TrainerSettings
) -> dict[str, Any]:
    """What changes the results: each selected task's spec, recipe and data content, and what the
    tasks share (confidence, baselines); a recipe field no task uses stays out."""
    data_dir = settings.resolved_data_dir()
    return {
        **output_settings(
            settings,
            exclude=(
                "log_every_steps",
                "catalog",
                "data_dir",
                "checkpoints",
                "label_counts",
                *RECIPE_FIELDS,
            ),
        ),
        "specs": {task.spec.name: task_settings(task, data_dir) for task in settings.plan},
        "seed": seed,
        "precision": trainer.precision,
        "grad_clip": trainer.grad_clip,
    }


def checkpoint_grids(settings: FinetuneSettings) -> dict[str, Any]:
    """Each task's grid for a checkpoint's weights: part of the key where a checkpoint is tuned."""
    return {task.spec.name: task.recipe.checkpoint_grid() for task in settings.plan}


def stage_sources(
    settings: FinetuneSettings,
    seed: int,
    trainer: TrainerSettings,
    tokenizer_ref: ArtifactRef,
    weights: Path,
    work_dir: Path,
    loggers_for: LoggerFactory,
    student_dir: Path | None = None,
    base_dir: Path | None = None,
) -> Sources:
    """What every task of a stage evaluates from: `weights` are the pretrained arm's."""
    trained = load_tokenizer(tokenizer_ref)
    return Sources(
        settings,
        seed,
        trainer,
        trained.tokenizer,
        asdict(trained.special),
        load_encoder_config(weights),
        weights,
        work_dir,
        loggers_for,
        student_dir,
        base_dir,
    )


def write_artifact(
    directory: Path,
    outputs: dict[str, Any],
    runs: dict[str, Any],
    predictions: dict[str, Any],
    confidence: float,
    before: str = "",
    after: str = "",
) -> None:
    """results.json, predictions.json, summary.md (the figures' table, between `before` and
    `after`) and the lift's bar chart."""
    figures = list(FinetuneOutputs.from_manifest(outputs).figures.values())
    (directory / RESULTS_FILE).write_text(json.dumps(runs, indent=2))
    (directory / PREDICTIONS_FILE).write_text(json.dumps(predictions))
    summary = before + markdown_table(figures, confidence) + after
    (directory / SUMMARY_FILE).write_text(summary + "\n")
    bar_chart(figures, directory / CHART_FILE)


def finetune(
    settings: FinetuneSettings,
    seed: int,
    trainer_settings: TrainerSettings,
    pretrain_ref: ArtifactRef,
    tokenizer_ref: ArtifactRef,
    store: ArtifactStore,
    loggers_for: LoggerFactory = lambda task, label: (),
    student_ref: ArtifactRef | None = None,
    base_ref: ArtifactRef | None = None,
) -> ArtifactRef:
    """Both arms per task; with `student_ref` (a distill artifact) the student as a third arm,
    its share of the teacher's lift, and teacher and student sizes and speed, in one table; with
    `base_ref` (an imported checkpoint that pretraining continued) the checkpoint as it was, and
    what continuing it bought over it."""
    record: dict[str, Any] = {
        "settings": stage_settings(settings, seed, trainer_settings),
        "inputs": {"pretrain": pretrain_ref.key, "tokenizer": tokenizer_ref.key},
    }
    if student_ref is not None:  # absent otherwise, so earlier artifacts keep their keys
        record["inputs"]["student"] = student_ref.key
    if base_ref is not None:
        record["inputs"]["base"] = base_ref.key
        record["settings"]["checkpoint_grids"] = checkpoint_grids(settings)
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])
    task_keys = record["settings"]["specs"]  # each task's part of the key: its arms' too
    student_dir = None if student_ref is None else student_ref.path
    base_dir = None if base_ref is None else base_ref.path

    def build(directory: Path) -> dict[str, Any]:
        outputs: dict[str, Any] = {"tasks": list(settings.tasks), "confidence": settings.confidence}
        sources = stage_sources(
            settings,
            seed,
            trainer_settings,
            tokenizer_ref,
            pretrain_ref.path,
            store.work_dir(STAGE, key),
            loggers_for,
            student_dir,
            base_dir,
        )
        arms = StoredArms(
            store, task_keys, seed, trainer_settings, tokenizer_ref, sources.encoder, base_ref
        )
        runs, predictions = evaluate_tasks(settings, sources, arms.of, outputs)
        after = kind_sections(settings, outputs, runs, predictions)
        if student_dir is not None:
            teacher, batch, length = pretrain_ref.path, settings.batch_size, settings.max_length
            outputs.update(measure_sizes(teacher, student_dir, batch, length))
            after += "\n\n" + distillation_table(outputs, settings.tasks, settings.confidence)
        write_artifact(directory, outputs, runs, predictions, settings.confidence, after=after)
        return outputs

    return store.get_or_build(STAGE, key, build, record)
