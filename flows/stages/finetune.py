"""Stage 4: downstream evaluation, from the pretrained encoder and from random init.

Every task in `finetune.tasks` runs both arms with one recipe over `finetune.seeds` seeds, each arm
with its own learning rate and epoch chosen on validation (flows/downstream/recipe.py). The
outputs are flat `<task>.<key>` figures; `summary.md`, `lift.png` and `results.json` (every run)
are written into the artifact.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.core.settings import output_settings
from flows.downstream.encoding import encode
from flows.downstream.load import Sampling, load_task, source_fingerprint
from flows.downstream.recipe import LoggerFactory, TaskRun, evaluate_task
from flows.downstream.report import bar_chart, markdown_table, task_outputs
from flows.downstream.settings import FinetuneSettings
from flows.downstream.spec import ARMS, TaskSpec
from flows.stages.tokenizer import load_tokenizer
from flows.training.trainer import TrainerSettings
from lightning_modules.models.serialization import load_encoder_config

STAGE = "finetune"
VERSION = 2
SUMMARY_FILE = "summary.md"
CHART_FILE = "lift.png"
RESULTS_FILE = "results.json"

__all__ = ["ARMS", "STAGE", "FinetuneSettings", "finetune"]


def stage_settings(
    settings: FinetuneSettings, seed: int, trainer: TrainerSettings
) -> dict[str, Any]:
    """What changes the results: the recipe, the selected tasks' specs and their data's content."""
    data_dir = settings.resolved_data_dir()
    return {
        **output_settings(settings, exclude=("log_every_steps", "catalog", "data_dir")),
        "specs": {
            spec.name: {**spec.model_dump(), "data": source_fingerprint(spec, data_dir)}
            for spec in settings.specs()
        },
        "seed": seed,
        "precision": trainer.precision,
        "grad_clip": trainer.grad_clip,
    }


def prepare_task(
    spec: TaskSpec,
    settings: FinetuneSettings,
    seed: int,
    tokenizer_ref: ArtifactRef,
    pretrained_dir: Path,
    trainer: TrainerSettings,
    work_dir: Path,
    loggers_for: LoggerFactory,
) -> tuple[TaskRun, dict[str, int]]:
    """Reads, samples and encodes a task's splits; returns the task's run and size outputs."""
    encoder = load_encoder_config(pretrained_dir)
    trained = load_tokenizer(tokenizer_ref)
    max_length = min(settings.max_length, encoder.max_position_embeddings)
    trained.tokenizer.enable_truncation(max_length)
    sampling = Sampling(
        settings.train_examples, settings.validation_examples, settings.test_examples, seed
    )
    data = load_task(spec, settings.resolved_data_dir(), sampling)
    splits = {
        name: encode(trained.tokenizer, examples, token_types=encoder.type_vocab_size > 1)
        for name, examples in data.splits.items()
    }
    sizes = {f"{spec.name}.{name}_examples": len(split) for name, split in splits.items()}
    run = TaskRun(
        spec=spec,
        labels=data.labels,
        splits=splits,
        settings=settings,
        trainer=trainer,
        encoder=encoder,
        pretrained_dir=pretrained_dir,
        pad_id=trained.special.pad,
        work_dir=work_dir,
        loggers_for=loggers_for,
    )
    return run, sizes


def finetune(
    settings: FinetuneSettings,
    seed: int,
    trainer_settings: TrainerSettings,
    pretrain_ref: ArtifactRef,
    tokenizer_ref: ArtifactRef,
    store: ArtifactStore,
    loggers_for: LoggerFactory = lambda task, label: (),
) -> ArtifactRef:
    record: dict[str, Any] = {
        "settings": stage_settings(settings, seed, trainer_settings),
        "inputs": {"pretrain": pretrain_ref.key, "tokenizer": tokenizer_ref.key},
    }
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])

    def build(directory: Path) -> dict[str, Any]:
        outputs: dict[str, Any] = {"tasks": list(settings.tasks), "confidence": settings.confidence}
        runs: dict[str, Any] = {}
        for spec in settings.specs():
            task_run, sizes = prepare_task(
                spec,
                settings,
                seed,
                tokenizer_ref,
                pretrain_ref.path,
                trainer_settings,
                store.work_dir(STAGE, key),
                loggers_for,
            )
            arms = evaluate_task(task_run, seed)
            outputs.update(sizes)
            outputs.update(task_outputs(spec.name, spec.metric, arms, settings.confidence))
            runs[spec.name] = {arm: asdict(result) for arm, result in arms.items()}
        (directory / RESULTS_FILE).write_text(json.dumps(runs, indent=2))
        (directory / SUMMARY_FILE).write_text(
            markdown_table(outputs, settings.tasks, settings.confidence) + "\n"
        )
        bar_chart(outputs, settings.tasks, directory / CHART_FILE)
        return outputs

    return store.get_or_build(STAGE, key, build, record)
