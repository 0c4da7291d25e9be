"""Stage 4c: the label-efficiency curve, when `finetune.label_counts` is set.

Each task is evaluated again at each count of labelled examples per seed: the finetune stage's
whole evaluation (every arm, the seeds, each arm's rate chosen on validation, the baselines, both
intervals on the lift) with the task's `train_examples` set to the count. Each point is a finetune
artifact of its own, keyed as one: a count equal to the run's own `train_examples` for a run of
that task alone is the run's finetune artifact (a cache hit), adding a count evaluates only that
count, and the random-init arm at each count is the usual cached control (`finetune_control`),
shared by every encoder of the same shape. The curve (`label_curve`: label_curve.png, a table and
label_curve.json) is one more artifact over the points.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.downstream.finetuning.recipe import LoggerFactory
from flows.downstream.settings import FinetuneSettings
from flows.downstream.statistics.label_points import (
    count_label,
    crossing,
    flat_points,
    markdown,
    plot,
    point,
)
from flows.stages.finetune import finetune
from flows.stages.training_types import FinetuneOutputs
from flows.training.settings import TrainerSettings

STAGE = "label_curve"
VERSION = 3
CHART_FILE = "label_curve.png"
TABLE_FILE = "label_curve.md"
POINTS_FILE = "label_curve.json"


def at_count(settings: FinetuneSettings, task: str, count: int | None) -> FinetuneSettings:
    """`task` alone, with `count` labelled examples per seed (None: the whole train pool): its
    catalog entry's recipe sets `train_examples`, which wins over `finetune.train_examples`."""
    entry = settings.catalog[task]
    recipe = {**(entry.get("recipe") or {}), "train_examples": count}
    catalog = {**settings.catalog, task: {**entry, "recipe": recipe}}
    return settings.model_copy(update={"tasks": [task], "catalog": catalog, "label_counts": None})


def evaluate_counts(
    settings: FinetuneSettings,
    seed: int,
    trainer: TrainerSettings,
    refs: dict[str, ArtifactRef],
    store: ArtifactStore,
    loggers_for: LoggerFactory,
) -> dict[str, dict[int | None, ArtifactRef]]:
    """Each task's finetune evaluation at each count; runs are logged as `n<count>-<run>`."""
    points: dict[str, dict[int | None, ArtifactRef]] = {}
    for task in settings.tasks:
        for count in settings.curve_counts:
            points.setdefault(task, {})[count] = finetune(
                at_count(settings, task, count),
                seed,
                trainer,
                refs["pretrain"],
                refs["tokenizer"],
                store,
                prefixed(loggers_for, count_label(count)),
                refs.get("distill"),
            )
    return points


def prefixed(loggers_for: LoggerFactory, label: str) -> LoggerFactory:
    """Training curves of a point's runs under `<label>-<run>` (`n100-pretrained-lr...`)."""
    return lambda task, run: loggers_for(task, f"{label}-{run}")


def label_curve(
    settings: FinetuneSettings,
    seed: int,
    trainer: TrainerSettings,
    refs: dict[str, ArtifactRef],
    store: ArtifactStore,
    loggers_for: LoggerFactory = lambda task, label: (),
) -> ArtifactRef | None:
    """The curve over `finetune.label_counts` (None when unset). `refs` holds the run's
    `pretrain` and `tokenizer` artifacts (and `distill`, whose student is then an arm too)."""
    if not settings.curve_counts:
        return None
    points = evaluate_counts(settings, seed, trainer, refs, store, loggers_for)
    record: dict[str, Any] = {
        "settings": {"confidence": settings.confidence},
        "inputs": {
            f"{task}.{count_label(count)}": ref.key
            for task, by_count in points.items()
            for count, ref in by_count.items()
        },
    }
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])

    def build(directory: Path) -> dict[str, Any]:
        level = f"{settings.confidence:.0%}"
        outputs: dict[str, Any] = {
            "tasks": list(points),
            "counts": [count_label(count) for count in settings.curve_counts],
            "confidence": settings.confidence,
        }
        curves, metrics = {}, {}
        for task, by_count in points.items():
            figures = {
                count: FinetuneOutputs.of(ref).figures[task] for count, ref in by_count.items()
            }
            task_points = {count: point(f, settings.confidence) for count, f in figures.items()}
            outputs.update(flat_points(task, task_points))
            curves[task] = sorted(task_points.values(), key=lambda p: p["labels"])
            metrics[task] = outputs[f"{task}.metric"] = next(iter(figures.values())).metric
            outputs[f"{task}.crossing"] = crossing(curves[task], settings.confidence)
        plot(curves, metrics, level, directory / CHART_FILE)
        sentences = "\n".join(f"- {task}: {outputs[f'{task}.crossing']}" for task in curves)
        (directory / TABLE_FILE).write_text(f"{markdown(curves, metrics, level)}\n\n{sentences}\n")
        (directory / POINTS_FILE).write_text(json.dumps(outputs, indent=2))
        return outputs

    return store.get_or_build(STAGE, key, build, record)
