"""Downstream evaluation, from the pretrained encoder and from random init.

Every task in `finetune.tasks` runs both arms with one recipe over `finetune.seeds` seeds, each arm
with its own learning rate and epoch chosen on validation (flows/downstream/finetuning/recipe.py),
beside baselines without an encoder (flows/downstream/finetuning/baselines.py). The lift gets a
paired t-interval over seeds and a paired bootstrap interval over test examples. The outputs are
flat `<task>.<key>` figures; `summary.md`, `lift.png` and `results.json` (every run) are written
into the artifact.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.core.settings import output_settings
from flows.downstream.finetuning.baselines import BaselineResult, evaluate_baselines
from flows.downstream.finetuning.caps import caps_outputs, caps_record
from flows.downstream.finetuning.qa_runs import SPAN, answerable
from flows.downstream.finetuning.recipe import (
    ArmResult,
    LoggerFactory,
    RunResult,
    TaskRun,
    evaluate_arm,
)
from flows.downstream.kinds.base import EncodeJob
from flows.downstream.kinds.registry import kind_of
from flows.downstream.settings import RECIPE_FIELDS, FinetuneSettings, TaskPlan
from flows.downstream.statistics.base_report import OVER_BASE, base_outputs
from flows.downstream.statistics.bootstrap import bootstrap_lift
from flows.downstream.statistics.distill_report import (
    distillation_table,
    size_outputs,
    student_outputs,
)
from flows.downstream.statistics.per_class import mean_report
from flows.downstream.statistics.report import (
    bar_chart,
    baseline_outputs,
    markdown_table,
    task_outputs,
)
from flows.downstream.statistics.speed import inference_tokens_per_second
from flows.downstream.tasks.load import TaskData, load_task, source_fingerprint, train_sample
from flows.downstream.tasks.spec import BASE_ARM, TaskSpec
from flows.stages.control_arm import CONTROL_ARM, base_record, cached_arm, control_record
from flows.stages.finetune_progress import FinishedTasks
from flows.stages.tokenizer import load_tokenizer
from flows.stages.training_types import FinetuneOutputs
from flows.training.settings import TrainerSettings
from lightning_modules.models.config import load_encoder_config
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.models.serialization import count_parameters, load_encoder_weights

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


def prepare_task(
    spec: TaskSpec,
    settings: FinetuneSettings,
    seed: int,
    tokenizer_ref: ArtifactRef,
    pretrained_dir: Path,
    trainer: TrainerSettings,
    work_dir: Path,
    loggers_for: LoggerFactory,
    student_dir: Path | None = None,
) -> tuple[TaskData, TaskRun, dict[str, Any]]:
    """Reads, samples and encodes a task's splits; returns the examples (for the baselines, with
    the caps that bit), the task's run and size outputs (`train_examples` is one seed's labelled
    sample, the pool when no limit is set)."""
    recipe = settings.task(spec).recipe
    encoder = load_encoder_config(pretrained_dir)
    trained = load_tokenizer(tokenizer_ref)
    max_length = min(recipe.max_length, encoder.max_position_embeddings)
    trained.tokenizer.enable_truncation(max_length)
    data = load_task(spec, settings.resolved_data_dir(), recipe.sampling(seed))
    kind = kind_of(spec.kind)
    job = EncodeJob(
        spec,
        recipe,
        data.labels,
        data.splits,
        trained.tokenizer,
        asdict(trained.special),
        encoder.type_vocab_size > 1,
        max_length,
    )
    encoded = kind.encode(job)
    splits = encoded.splits
    sizes: dict[str, Any] = {
        f"{spec.name}.{name}_examples": len(split.gold) for name, split in splits.items()
    }
    if recipe.train_examples is not None:
        sizes[f"{spec.name}.train_examples"] = min(recipe.train_examples, len(splits["train"].gold))
    data.caps = caps_record(
        spec.name, recipe, data.pools, splits, max_length, spec.recipe, data.marker_drops
    )
    if data.carved:
        data.caps["carved"] = data.carved
    sizes.update(caps_outputs(spec.name, data.caps, splits))
    sizes.update(kind.size_outputs(spec.name, splits))
    run = TaskRun(
        spec=spec,
        labels=data.labels,
        splits=splits,
        settings=recipe,
        log_every_steps=settings.log_every_steps,
        trainer=trainer,
        encoder=encoder,
        pretrained_dir=pretrained_dir,
        pad_id=trained.special.pad,
        work_dir=work_dir,
        loggers_for=loggers_for,
        student_dir=student_dir,
        student_encoder=None if student_dir is None else load_encoder_config(student_dir),
        prompt=encoded.prompt,
        markers=encoded.markers,
        unanswerable=kind.abstains(spec, data.splits["train"]),
    )
    return data, run, sizes


def run_baselines(
    data: TaskData, settings: FinetuneSettings, seeds: list[int]
) -> dict[str, BaselineResult]:
    """Baselines fitted on each seed's labelled sample; once on the whole pool without a limit
    (the same data would give the same fit five times)."""
    pool = data.splits["train"]
    limit = settings.task(data.spec).recipe.train_examples
    samples = [train_sample(len(pool), limit, seed) for seed in seeds]
    if all(positions is None for positions in samples):
        samples = [None]
    train_sets = [
        pool if positions is None else [pool[p] for p in positions] for positions in samples
    ]
    names = settings.baselines_for(data.spec)
    return evaluate_baselines(data.spec, names, data.labels, data.splits, train_sets)


def lift_figures(
    task_run: TaskRun, arms: dict[str, ArmResult], settings: FinetuneSettings, seed: int
) -> dict[str, Any]:
    """What every evaluation of a task reports, the stage's and each lift-curve point's: each
    arm's mean and std, the lift with its paired-t interval, and its bootstrap interval (a QA
    task's span skill's too)."""
    spec, epochs = task_run.spec, task_run.settings.epochs
    # An arm from a public checkpoint (a base arm beside it) has its own epoch limit.
    pretrained_limit = None if task_run.base_dir is None else task_run.grid("pretrained")[1]
    return {
        **task_outputs(spec.name, spec.metric, arms, settings.confidence, epochs, pretrained_limit),
        **bootstrap_outputs(task_run, arms, settings, seed),
        **span_bootstrap(task_run, arms, settings, seed),
    }


def span_bootstrap(
    task_run: TaskRun,
    arms: dict[str, ArmResult],
    settings: FinetuneSettings,
    seed: int,
    pair: tuple[str, str] = ("pretrained", "random_init"),
    name: str = "lift",
) -> dict[str, float]:
    """A QA task's span skill (`<task>.<name>_span_<metric>_bootstrap_*`): the bootstrap over
    its answerable test questions; nothing for another kind."""
    if not task_run.question_answering:
        return {}
    return bootstrap_outputs(task_run, arms, settings, seed, pair, name, span=True)


def bootstrap_outputs(
    task_run: TaskRun,
    arms: dict[str, ArmResult],
    settings: FinetuneSettings,
    seed: int,
    pair: tuple[str, str] = ("pretrained", "random_init"),
    name: str = "lift",
    span: bool = False,
) -> dict[str, float]:
    """`<task>.<name>_<metric>_bootstrap_low|high`: the paired bootstrap over test examples of
    the first arm of `pair` minus the second (the lift; `over_base` for a continued checkpoint).
    `span`: a QA task's span skill, over its answerable test questions and their best spans."""
    spec, gold = task_run.spec, task_run.splits["test"].gold
    kept = answerable(gold) if span else list(range(len(gold)))
    if not kept:
        return {}

    def predicted(run: RunResult) -> list[Any]:
        return [(run.test_spans or [])[i] for i in kept] if span else run.test_predictions

    kind, labels = task_run.kind, task_run.labels
    statistics = {
        arm: [
            kind.example_statistics([gold[i] for i in kept], predicted(run), labels)
            for run in arms[arm].runs
        ]
        for arm in pair
    }
    low, high = bootstrap_lift(
        statistics[pair[0]],
        statistics[pair[1]],
        lambda totals: kind.bootstrap_metric(spec.metric, totals, labels, spec.negative_label),
        settings.bootstrap_samples,
        settings.confidence,
        seed,
    )
    prefix = f"{spec.name}.{name}_{SPAN if span else ''}{spec.metric}_bootstrap"
    return {f"{prefix}_low": low, f"{prefix}_high": high}


def task_record(
    task_run: TaskRun, arms: dict[str, ArmResult], baselines: dict[str, BaselineResult]
) -> dict[str, Any]:
    """A task's entry of results.json: every run (without its raw predictions), each arm's
    per-class test scores (mean over seeds), every baseline."""
    gold = task_run.splits["test"].gold
    record: dict[str, Any] = {}
    for arm, result in arms.items():
        record[arm] = asdict(result)
        for run in record[arm]["runs"]:
            del run["test_predictions"]
        record[arm]["per_class"] = mean_report(
            [
                task_run.kind.per_class(gold, run.test_predictions, task_run.labels)
                for run in result.runs
            ]
        )
    record["baselines"] = {name: asdict(result) for name, result in baselines.items()}
    return record


def measure_sizes(
    teacher_dir: Path, student_dir: Path, settings: FinetuneSettings
) -> dict[str, Any]:
    """Encoder parameters and inference tokens/s of teacher and student, side by side, now."""
    encoders = {}
    for name, directory in (("teacher", teacher_dir), ("student", student_dir)):
        encoders[name] = BertEncoder(load_encoder_config(directory))
        load_encoder_weights(encoders[name], directory)
    seq_len = min(
        settings.max_length, *(e.config.max_position_embeddings for e in encoders.values())
    )
    speed = inference_tokens_per_second(encoders, settings.batch_size, seq_len)
    parameters = {name: count_parameters(encoder) for name, encoder in encoders.items()}
    return {
        **size_outputs(parameters, speed),
        "distill.speed_batch_size": settings.batch_size,
        "distill.speed_seq_len": seq_len,
    }


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
        record["settings"]["checkpoint_grids"] = {
            task.spec.name: task.recipe.checkpoint_grid() for task in settings.plan
        }
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])
    task_keys = record["settings"]["specs"]  # each task's part of the key: its control's too
    student_dir = None if student_ref is None else student_ref.path

    def build(directory: Path) -> dict[str, Any]:
        outputs: dict[str, Any] = {"tasks": list(settings.tasks), "confidence": settings.confidence}
        runs: dict[str, Any] = {}
        predictions: dict[str, Any] = {}
        finished = FinishedTasks.in_work_dir(store.work_dir(STAGE, key))
        for task in settings.plan:
            spec, recipe, seeds = task.spec, task.recipe, task.seeds(seed)
            if finished.restore(spec.name, outputs, runs, predictions):
                continue  # a stopped run of this key finished it
            data, task_run, sizes = prepare_task(
                spec,
                settings,
                seed,
                tokenizer_ref,
                pretrain_ref.path,
                trainer_settings,
                store.work_dir(STAGE, key),
                loggers_for,
                student_dir,
            )
            if base_ref is not None:
                task_run = replace(task_run, base_dir=base_ref.path)
            baselines = run_baselines(data, settings, seeds)
            control = control_record(
                task_keys[spec.name], seed, trainer_settings, task_run.encoder, tokenizer_ref
            )
            records = {CONTROL_ARM: control}
            if base_ref is not None:
                records[BASE_ARM] = base_record(control, base_ref, recipe.checkpoint_grid())
            arms = {
                arm: cached_arm(task_run, arm, seeds, records[arm], store)
                if arm in records
                else evaluate_arm(task_run, arm, seeds)
                for arm in task_run.arms
            }
            outputs.update(sizes)
            outputs[f"{spec.name}.recipe"] = task.text() + (
                f"; {recipe.checkpoint_grid_text()}" if base_ref is not None else ""
            )
            outputs[f"{spec.name}.recipe_set_by_task"] = ",".join(sorted(spec.recipe))
            outputs.update(lift_figures(task_run, arms, settings, seed))
            outputs.update(baseline_outputs(spec.name, spec.metric, baselines))
            outputs.update(task_run.kind.report_outputs(spec.name, arms, baselines))
            if student_dir is not None:
                outputs.update(student_outputs(spec.name, arms, settings.confidence))
            if base_ref is not None:
                outputs.update(base_outputs(spec.name, arms, settings.confidence))
                pair = ("pretrained", BASE_ARM)
                outputs.update(bootstrap_outputs(task_run, arms, settings, seed, pair, OVER_BASE))
                outputs.update(span_bootstrap(task_run, arms, settings, seed, pair, OVER_BASE))
            record = task_record(task_run, arms, baselines)
            runs[spec.name] = {
                **record,
                "labels": data.label_record(),
                "caps": data.caps,
                "recipe": {**recipe.model_dump(), "set_by_task": sorted(spec.recipe)},
            }
            predictions[spec.name] = {
                arm: [run.test_predictions for run in result.runs] for arm, result in arms.items()
            }
            finished.keep(spec.name, outputs, runs, predictions)
        figures = list(FinetuneOutputs.from_manifest(outputs).figures.values())
        summary = markdown_table(figures, settings.confidence)
        for spec in settings.specs():
            arm_names = list(predictions[spec.name])
            section = kind_of(spec.kind).summary(spec.name, outputs, runs[spec.name], arm_names)
            summary += f"\n\n{section}" if section else ""
        if student_dir is not None:
            outputs.update(measure_sizes(pretrain_ref.path, student_dir, settings))
            summary += "\n\n" + distillation_table(outputs, settings.tasks, settings.confidence)
        (directory / RESULTS_FILE).write_text(json.dumps(runs, indent=2))
        (directory / PREDICTIONS_FILE).write_text(json.dumps(predictions))
        (directory / SUMMARY_FILE).write_text(summary + "\n")
        bar_chart(figures, directory / CHART_FILE)
        return outputs

    return store.get_or_build(STAGE, key, build, record)
