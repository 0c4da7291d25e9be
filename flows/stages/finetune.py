"""Stage 4: downstream evaluation, from the pretrained encoder and from random init.

Every task in `finetune.tasks` runs both arms with one recipe over `finetune.seeds` seeds, each arm
with its own learning rate and epoch chosen on validation (flows/downstream/recipe.py), beside
baselines without an encoder (flows/downstream/baselines.py). The lift gets a paired t-interval
over seeds and a paired bootstrap interval over test examples. The outputs are flat
`<task>.<key>` figures; `summary.md`, `lift.png` and `results.json` (every run) are written into
the artifact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Self

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.core.outputs import StageOutputs
from flows.core.settings import output_settings
from flows.downstream.baselines import BaselineResult, evaluate_baselines
from flows.downstream.bootstrap import bootstrap_lift, example_statistics
from flows.downstream.encoding import encode
from flows.downstream.figures import TaskFigures
from flows.downstream.load import TaskData, load_task, source_fingerprint, train_sample
from flows.downstream.per_class import mean_report, per_class
from flows.downstream.recipe import ArmResult, LoggerFactory, TaskRun, evaluate_task
from flows.downstream.report import bar_chart, baseline_outputs, markdown_table, task_outputs
from flows.downstream.settings import FinetuneSettings
from flows.downstream.spec import ARMS, TaskSpec
from flows.stages.tokenizer import load_tokenizer
from flows.training.settings import TrainerSettings
from lightning_modules.models.serialization import load_encoder_config

STAGE = "finetune"
VERSION = 3  # 3: per-seed labelled samples, bootstrap interval, baselines, capped flags
SUMMARY_FILE = "summary.md"
CHART_FILE = "lift.png"
RESULTS_FILE = "results.json"
PREDICTIONS_FILE = "predictions.json"  # test predictions per task, arm and seed: bootstrap input

__all__ = ["ARMS", "STAGE", "FinetuneOutputs", "FinetuneSettings", "finetune"]


@dataclass(frozen=True)
class FinetuneOutputs(StageOutputs):
    """The tasks and their figures. The manifest keeps them flat (`<task>.<key>`, as MLflow logs
    them); `figures` reads each task's through attributes."""

    STAGE: ClassVar[str] = STAGE
    tasks: list[str]
    confidence: float
    figures: dict[str, TaskFigures] = field(default_factory=dict)

    @classmethod
    def from_manifest(cls, outputs: Mapping[str, Any]) -> Self:
        read = super().from_manifest(outputs)
        return replace(read, figures={task: TaskFigures.read(outputs, task) for task in read.tasks})

    def to_manifest(self) -> dict[str, Any]:
        return {
            "tasks": list(self.tasks),
            "confidence": self.confidence,
            **{
                f"{task}.{key}": value
                for task, figures in self.figures.items()
                for key, value in figures.metrics.items()
            },
        }


def stage_settings(
    settings: FinetuneSettings, seed: int, trainer: TrainerSettings
) -> dict[str, Any]:
    """What changes the results: the recipe, the selected tasks' specs and their data's content."""
    data_dir = settings.resolved_data_dir()
    return {
        **output_settings(
            settings, exclude=("log_every_steps", "catalog", "data_dir", "checkpoints")
        ),
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
) -> tuple[TaskData, TaskRun, dict[str, Any]]:
    """Reads, samples and encodes a task's splits; returns the examples (for the baselines), the
    task's run and size outputs (`train_examples` is one seed's labelled sample, the pool when no
    limit is set)."""
    encoder = load_encoder_config(pretrained_dir)
    trained = load_tokenizer(tokenizer_ref)
    max_length = min(settings.max_length, encoder.max_position_embeddings)
    trained.tokenizer.enable_truncation(max_length)
    data = load_task(spec, settings.resolved_data_dir(), settings.sampling(seed))
    splits = {
        name: encode(trained.tokenizer, examples, token_types=encoder.type_vocab_size > 1)
        for name, examples in data.splits.items()
    }
    sizes = {f"{spec.name}.{name}_examples": len(split) for name, split in splits.items()}
    if settings.train_examples is not None:
        sizes[f"{spec.name}.train_examples"] = min(settings.train_examples, len(splits["train"]))
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
    return data, run, sizes


def run_baselines(
    data: TaskData, settings: FinetuneSettings, seeds: list[int]
) -> dict[str, BaselineResult]:
    """Baselines fitted on each seed's labelled sample; once on the whole pool without a limit
    (the same data would give the same fit five times)."""
    pool = data.splits["train"]
    samples = [train_sample(len(pool), settings.train_examples, seed) for seed in seeds]
    if all(positions is None for positions in samples):
        samples = [None]
    train_sets = [
        pool if positions is None else [pool[p] for p in positions] for positions in samples
    ]
    names = settings.baselines_for(data.spec)
    return evaluate_baselines(data.spec, names, data.labels, data.splits, train_sets)


def bootstrap_outputs(
    task_run: TaskRun, arms: dict[str, ArmResult], settings: FinetuneSettings, seed: int
) -> dict[str, float]:
    """`<task>.lift_<metric>_bootstrap_low|high`: the paired bootstrap over test examples."""
    spec, gold = task_run.spec, task_run.splits["test"].gold
    statistics = {
        arm: [
            example_statistics(spec.kind, gold, run.test_predictions, task_run.labels)
            for run in arms[arm].runs
        ]
        for arm in ARMS
    }
    low, high = bootstrap_lift(
        statistics["pretrained"],
        statistics["random_init"],
        spec.metric,
        len(task_run.labels),
        settings.bootstrap_samples,
        settings.confidence,
        seed,
    )
    prefix = f"{spec.name}.lift_{spec.metric}_bootstrap"
    return {f"{prefix}_low": low, f"{prefix}_high": high}


def task_record(
    task_run: TaskRun, arms: dict[str, ArmResult], baselines: dict[str, BaselineResult]
) -> dict[str, Any]:
    """A task's entry of results.json: every run (without its raw predictions), each arm's
    per-class test scores (mean over seeds), every baseline."""
    spec, gold = task_run.spec, task_run.splits["test"].gold
    record: dict[str, Any] = {}
    for arm, result in arms.items():
        record[arm] = asdict(result)
        for run in record[arm]["runs"]:
            del run["test_predictions"]
        record[arm]["per_class"] = mean_report(
            [
                per_class(spec.kind, gold, run.test_predictions, task_run.labels)
                for run in result.runs
            ]
        )
    record["baselines"] = {name: asdict(result) for name, result in baselines.items()}
    return record


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
        predictions: dict[str, Any] = {}
        seeds = [seed + offset for offset in range(settings.seeds)]
        for spec in settings.specs():
            data, task_run, sizes = prepare_task(
                spec,
                settings,
                seed,
                tokenizer_ref,
                pretrain_ref.path,
                trainer_settings,
                store.work_dir(STAGE, key),
                loggers_for,
            )
            baselines = run_baselines(data, settings, seeds)
            arms = evaluate_task(task_run, seeds)
            outputs.update(sizes)
            outputs.update(
                task_outputs(spec.name, spec.metric, arms, settings.confidence, settings.epochs)
            )
            outputs.update(bootstrap_outputs(task_run, arms, settings, seed))
            outputs.update(baseline_outputs(spec.name, spec.metric, baselines))
            record = task_record(task_run, arms, baselines)
            runs[spec.name] = {**record, "labels": data.label_record()}
            predictions[spec.name] = {
                arm: [run.test_predictions for run in arms[arm].runs] for arm in ARMS
            }
        (directory / RESULTS_FILE).write_text(json.dumps(runs, indent=2))
        (directory / PREDICTIONS_FILE).write_text(json.dumps(predictions))
        figures = list(FinetuneOutputs.from_manifest(outputs).figures.values())
        (directory / SUMMARY_FILE).write_text(markdown_table(figures, settings.confidence) + "\n")
        bar_chart(figures, directory / CHART_FILE)
        return outputs

    return store.get_or_build(STAGE, key, build, record)
