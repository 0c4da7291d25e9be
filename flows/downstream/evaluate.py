"""One task's evaluation, from its plan to what a stage writes of it: the arms, each tuned on its
grid over the seeds, the baselines, and every figure and interval reported of them.

A stage (flows/stages/finetune.py, checkpoint_evaluation.py) keys, caches, resumes and writes;
for each task it comes down here once, with the task's plan and its `Sources`, and gets back a
`TaskResult`. Nothing here calls back up into a stage: an arm the stage keeps in the store comes
down keyed (`CachedArm`) and is fitted here when no run has published it. A lift-curve point
(flows/stages/lift_curve.py) comes down once per task too, for `evaluate_point`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from flows.downstream.finetuning.baselines import BaselineResult, evaluate_baselines
from flows.downstream.finetuning.cached_arm import CachedArm
from flows.downstream.finetuning.caps import caps_outputs, caps_record
from flows.downstream.finetuning.lift_figures import (
    bootstrap_outputs,
    lift_figures,
    span_bootstrap,
    task_record,
)
from flows.downstream.finetuning.recipe import ArmResult, LoggerFactory, TaskRun, evaluate_arm
from flows.downstream.kinds.base import Encoded, EncodeJob
from flows.downstream.kinds.registry import kind_of
from flows.downstream.settings import FinetuneSettings, TaskPlan
from flows.downstream.statistics.base_report import OVER_BASE, base_outputs
from flows.downstream.statistics.distill_report import student_outputs
from flows.downstream.statistics.report import baseline_outputs
from flows.downstream.tasks.load import TaskData, load_task, train_sample
from flows.downstream.tasks.spec import BASE_ARM, STUDENT_ARM
from flows.training.settings import TrainerSettings
from lightning_modules.models.config import EncoderConfig, load_encoder_config


@dataclass(frozen=True)
class Sources:
    """What a task's evaluation reads besides its plan: what the stage's tasks share, the
    weights each arm starts from, where runs log and keep scratch, and the arms the stage keeps
    in the store."""

    settings: FinetuneSettings  # confidence, baselines, bootstrap samples, data dir, logging
    seed: int
    trainer: TrainerSettings
    tokenizer: Tokenizer  # the run's; each task encodes with a copy (encoding may add tokens)
    special: Mapping[str, int]  # its special token ids, by role
    encoder: EncoderConfig  # the shape of the pretrained weights
    pretrained_dir: Path
    work_dir: Path
    loggers_for: LoggerFactory
    student_dir: Path | None = None  # a distilled student: an arm of its own
    base_dir: Path | None = None  # the imported checkpoint the pretrained weights continued
    cached: Mapping[str, CachedArm] = field(default_factory=dict)  # by the arm reported
    arms: tuple[str, ...] | None = None  # the arms reported; None: every arm the run has


@dataclass(frozen=True)
class TaskResult:
    """What a stage writes of one task: its flat `<task>.` outputs, its entry of results.json,
    and each arm's test predictions, one list per run (predictions.json)."""

    outputs: dict[str, Any]
    record: dict[str, Any]
    predictions: dict[str, list[Any]]


def evaluate_task(task: TaskPlan, sources: Sources) -> TaskResult:
    """One task: its splits read and encoded, its baselines fitted on each seed's labelled
    sample, each arm tuned over the seeds (or read from the store), and every figure of it."""
    data, run, sizes = prepare_task(task, sources)
    seeds = task.seeds(sources.seed)
    baselines = run_baselines(data, task, sources.settings.baselines_for(task.spec), seeds)
    arms = {arm: arm_result(run, arm, seeds, sources) for arm in sources.arms or run.arms}
    record = {
        **task_record(run, arms, baselines),
        "labels": data.label_record(),
        "caps": data.caps,
        "recipe": {**task.recipe.model_dump(), "set_by_task": sorted(task.spec.recipe)},
    }
    return TaskResult(
        {**sizes, **recipe_outputs(task, sources), **arm_outputs(run, arms, baselines, sources)},
        record,
        {arm: [fit.test_predictions for fit in result.runs] for arm, result in arms.items()},
    )


def evaluate_point(
    task: TaskPlan, sources: Sources, references: dict[str, ArmResult]
) -> dict[str, Any]:
    """A lift-curve point's figures of one task: the pretrained arm fitted from the weights kept
    at that point (`sources.pretrained_dir`), paired with `references`, the finetune stage's
    arms that do not depend on how long pretraining ran (random init, a continuation's base)."""
    _, run, _ = prepare_task(task, sources)
    seeds = task.seeds(sources.seed)
    arms = {"pretrained": evaluate_arm(run, "pretrained", seeds), **references}
    settings, seed = sources.settings, sources.seed
    outputs = lift_figures(run, arms, settings, seed)
    if sources.base_dir is not None:
        pair = ("pretrained", BASE_ARM)
        outputs.update(base_outputs(task.spec.name, arms, settings.confidence))
        outputs.update(bootstrap_outputs(run, arms, settings, seed, pair, OVER_BASE))
    return outputs


def prepare_task(task: TaskPlan, sources: Sources) -> tuple[TaskData, TaskRun, dict[str, Any]]:
    """Reads, samples and encodes a task's splits; returns the examples (for the baselines, with
    the caps that bit), the task's run and size outputs."""
    spec, recipe, encoder = task.spec, task.recipe, sources.encoder
    max_length = min(recipe.max_length, encoder.max_position_embeddings)
    tokenizer = Tokenizer.from_str(sources.tokenizer.to_str())
    tokenizer.enable_truncation(max_length)
    data = load_task(spec, sources.settings.resolved_data_dir(), recipe.sampling(sources.seed))
    kind = kind_of(spec.kind)
    job = EncodeJob(
        spec,
        recipe,
        data.labels,
        data.splits,
        tokenizer,
        sources.special,
        encoder.type_vocab_size > 1,
        max_length,
    )
    encoded = kind.encode(job)
    data.caps = caps_record(
        spec.name, recipe, data.pools, encoded.splits, max_length, spec.recipe, data.marker_drops
    )
    if data.carved:
        data.caps["carved"] = data.carved
    return data, task_run(task, data, encoded, sources), size_outputs(task, data, encoded)


def task_run(task: TaskPlan, data: TaskData, encoded: Encoded, sources: Sources) -> TaskRun:
    """What every run of the task shares."""
    student = sources.student_dir
    return TaskRun(
        spec=task.spec,
        labels=data.labels,
        splits=encoded.splits,
        settings=task.recipe,
        log_every_steps=sources.settings.log_every_steps,
        trainer=sources.trainer,
        encoder=sources.encoder,
        pretrained_dir=sources.pretrained_dir,
        pad_id=sources.special["pad"],
        work_dir=sources.work_dir,
        loggers_for=sources.loggers_for,
        student_dir=student,
        student_encoder=None if student is None else load_encoder_config(student),
        prompt=encoded.prompt,
        base_dir=sources.base_dir,
        markers=encoded.markers,
        unanswerable=kind_of(task.spec.kind).abstains(task.spec, data.splits["train"]),
    )


def size_outputs(task: TaskPlan, data: TaskData, encoded: Encoded) -> dict[str, Any]:
    """Each split's examples (`train_examples`: one seed's labelled sample, the pool when no
    limit is set), the caps that bit, and the kind's own sizes."""
    name, limit, splits = task.spec.name, task.recipe.train_examples, encoded.splits
    sizes: dict[str, Any] = {f"{name}.{split}_examples": len(s.gold) for split, s in splits.items()}
    if limit is not None:
        sizes[f"{name}.train_examples"] = min(limit, len(splits["train"].gold))
    sizes.update(caps_outputs(name, data.caps, splits))
    sizes.update(kind_of(task.spec.kind).size_outputs(name, splits))
    return sizes


def run_baselines(
    data: TaskData, task: TaskPlan, names: tuple[str, ...], seeds: list[int]
) -> dict[str, BaselineResult]:
    """Baselines `names` fitted on each seed's labelled sample; once on the whole pool without a
    limit (the same data would give the same fit five times)."""
    pool = data.splits["train"]
    samples = [train_sample(len(pool), task.recipe.train_examples, seed) for seed in seeds]
    if all(positions is None for positions in samples):
        samples = [None]
    train_sets = [
        pool if positions is None else [pool[p] for p in positions] for positions in samples
    ]
    return evaluate_baselines(task.spec, names, data.labels, data.splits, train_sets)


def arm_result(run: TaskRun, arm: str, seeds: list[int], sources: Sources) -> ArmResult:
    """`arm` from the store where the stage keeps it (fitted first when unpublished), else
    fitted here."""
    cached = sources.cached.get(arm)
    return evaluate_arm(run, arm, seeds) if cached is None else cached.result(run, seeds)


def recipe_outputs(task: TaskPlan, sources: Sources) -> dict[str, str]:
    """The recipe the task ran on (with the grid for a checkpoint's weights where there is one),
    and the fields its catalog entry set."""
    name, recipe = task.spec.name, task.recipe
    grid = "" if sources.base_dir is None else f"; {recipe.checkpoint_grid_text()}"
    return {
        f"{name}.recipe": task.text() + grid,
        f"{name}.recipe_set_by_task": ",".join(sorted(task.spec.recipe)),
    }


def arm_outputs(
    run: TaskRun, arms: dict[str, ArmResult], baselines: dict[str, BaselineResult], sources: Sources
) -> dict[str, Any]:
    """The lift with both intervals, the baselines, the kind's own lines, a student's share of
    the lift, and what continuing a checkpoint bought over its base."""
    spec, settings, seed = run.spec, sources.settings, sources.seed
    outputs = {
        **lift_figures(run, arms, settings, seed),
        **baseline_outputs(spec.name, spec.metric, baselines),
        **run.kind.report_outputs(spec.name, arms, baselines),
    }
    if STUDENT_ARM in arms:
        outputs.update(student_outputs(spec.name, arms, settings.confidence))
    if BASE_ARM in arms:
        pair = ("pretrained", BASE_ARM)
        outputs.update(base_outputs(spec.name, arms, settings.confidence))
        outputs.update(bootstrap_outputs(run, arms, settings, seed, pair, OVER_BASE))
        outputs.update(span_bootstrap(run, arms, settings, seed, pair, OVER_BASE))
    return outputs


def kind_sections(
    settings: FinetuneSettings,
    outputs: dict[str, Any],
    runs: dict[str, Any],
    predictions: dict[str, Any],
) -> str:
    """Each task kind's own section of summary.md, after the figures' table (empty for a kind
    with none)."""
    text = ""
    for task in settings.plan:
        name = task.spec.name
        section = kind_of(task.spec.kind).summary(
            name, outputs, runs[name], list(predictions[name])
        )
        text += f"\n\n{section}" if section else ""
    return text
