"""`cloze evaluate`'s stage: a checkpoint as it is, against random init, on the tasks.

Before any pretraining a team asks how good a public checkpoint is on its own tasks. This stage
answers with the two arms a continuation of that checkpoint would fit anyway: `base` (the
imported checkpoint, on the grid for pretrained encoders) and `random_init`, each fetched through
`cached_arm` under the very records the finetune stage uses (flows/stages/control_arm.py). So a
later continuation of the same checkpoint on the same tasks and seed reuses both arms, and an
evaluation after a continuation fits nothing.

Its artifact is a finetune artifact (stage `finetune`, the same flat outputs), so the summary,
MLflow and Prefect show it as a run's finetune stage. Its `pretrained` arm is the checkpoint as
it is, its lift the checkpoint's own over random init; `evaluated_checkpoint` names the folder
and tells the summary to say `base`. Its key holds the checkpoint and the tokenizer in place of a
pretrain artifact, so it never collides with a pipeline's.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.downstream.finetuning.recipe import LoggerFactory
from flows.downstream.settings import FinetuneSettings
from flows.downstream.statistics.report import bar_chart, baseline_outputs, markdown_table
from flows.downstream.statistics.task_figures import EVALUATED
from flows.downstream.tasks.spec import BASE_ARM
from flows.stages.control_arm import CONTROL_ARM, base_record, cached_arm, control_record
from flows.stages.finetune import (
    CHART_FILE,
    PREDICTIONS_FILE,
    RESULTS_FILE,
    STAGE,
    SUMMARY_FILE,
    lift_figures,
    prepare_task,
    run_baselines,
    stage_settings,
    task_record,
)
from flows.stages.finetune_progress import FinishedTasks
from flows.stages.training_types import FinetuneOutputs
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
            "checkpoint_grids": {
                task.spec.name: task.recipe.checkpoint_grid() for task in settings.plan
            },
        },
        "inputs": {"checkpoint": checkpoint_ref.key, "tokenizer": tokenizer_ref.key},
    }
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])
    task_keys = record["settings"]["specs"]  # each task's part of the key: its arms' too

    def build(directory: Path) -> dict[str, Any]:
        outputs: dict[str, Any] = {
            "tasks": list(settings.tasks),
            "confidence": settings.confidence,
            EVALUATED: checkpoint_ref.outputs.get("name", checkpoint_ref.key),
        }
        runs: dict[str, Any] = {}
        predictions: dict[str, Any] = {}
        finished = FinishedTasks.in_work_dir(store.work_dir(STAGE, key))
        for task in settings.plan:
            spec, recipe, seeds = task.spec, task.recipe, task.seeds(seed)
            if finished.restore(spec.name, outputs, runs, predictions):
                continue
            data, task_run, sizes = prepare_task(
                spec,
                settings,
                seed,
                tokenizer_ref,
                checkpoint_ref.path,
                trainer_settings,
                store.work_dir(STAGE, key),
                loggers_for,
            )
            task_run = replace(task_run, base_dir=checkpoint_ref.path)
            baselines = run_baselines(data, settings, seeds)
            control = control_record(
                task_keys[spec.name], seed, trainer_settings, task_run.encoder, tokenizer_ref
            )
            base = base_record(control, checkpoint_ref, recipe.checkpoint_grid())
            arms = {
                "pretrained": cached_arm(task_run, BASE_ARM, seeds, base, store),
                CONTROL_ARM: cached_arm(task_run, CONTROL_ARM, seeds, control, store),
            }
            outputs.update(sizes)
            outputs[f"{spec.name}.recipe"] = f"{task.text()}; {recipe.checkpoint_grid_text()}"
            outputs[f"{spec.name}.recipe_set_by_task"] = ",".join(sorted(spec.recipe))
            outputs.update(lift_figures(task_run, arms, settings, seed))
            outputs.update(baseline_outputs(spec.name, spec.metric, baselines))
            outputs.update(task_run.kind.report_outputs(spec.name, arms, baselines))
            runs[spec.name] = {
                **task_record(task_run, arms, baselines),
                "labels": data.label_record(),
                "caps": data.caps,
                "recipe": {**recipe.model_dump(), "set_by_task": sorted(spec.recipe)},
            }
            predictions[spec.name] = {
                arm: [run.test_predictions for run in result.runs] for arm, result in arms.items()
            }
            finished.keep(spec.name, outputs, runs, predictions)
        figures = list(FinetuneOutputs.from_manifest(outputs).figures.values())
        (directory / RESULTS_FILE).write_text(json.dumps(runs, indent=2))
        (directory / PREDICTIONS_FILE).write_text(json.dumps(predictions))
        (directory / SUMMARY_FILE).write_text(
            f"Checkpoint {outputs[EVALUATED]} as it is: the `pretrained` column is its base "
            "arm, the lift its own over random init.\n\n"
            + markdown_table(figures, settings.confidence)
            + "\n"
        )
        bar_chart(figures, directory / CHART_FILE)
        return outputs

    return store.get_or_build(STAGE, key, build, record)
