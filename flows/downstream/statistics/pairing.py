"""Arms of different runs, paired by seed: the comparisons one run's table cannot hold.

A finetune artifact's `results.json` keeps every run's seed and test scores. A finetune seed fixes
the labelled sample, the head's init and the data order, so two arms scored on the same task at
the same seeds pair like the two arms of one run: their per-seed differences remove that shared
noise, and a paired t-interval over them is the claim's interval. Examples: the domain-continued
model against the general one (`flows/lift.py`), a distilled student against the same
student pretrained from scratch (`python -m flows.compare.arms`).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.core.artifacts import MANIFEST_FILE
from flows.core.settings import ConfigError
from flows.downstream.statistics.report import paired_interval, std

# Recipe fields that decide which labelled examples a seed draws: arms pair only if they agree.
SAMPLING_FIELDS = ("train_examples", "validation_examples", "test_examples")
# So does the pool a limited-label sample is drawn from (another file, or `drop_contained_rows`).
TRAIN_POOL = "train_pool"


@dataclass(frozen=True)
class ArmScores:
    """One arm's test score per seed on one task, and where it was read."""

    source: str
    task: str
    metric: str
    by_seed: dict[int, float]
    sampling: dict[str, Any]

    @property
    def summary(self) -> str:
        scores = list(self.by_seed.values())
        return f"{statistics.fmean(scores):.3f} ± {std(scores):.3f}"


@dataclass(frozen=True)
class PairedDifference:
    """`better - base` per shared seed: its mean and its paired t-interval (None at one seed)."""

    differences: list[float]
    interval: tuple[float, float] | None

    @property
    def mean(self) -> float:
        return statistics.fmean(self.differences)

    @property
    def text(self) -> str:
        ci = f" [{self.interval[0]:+.3f}, {self.interval[1]:+.3f}]" if self.interval else ""
        return f"{self.mean:+.3f}{ci}"

    @property
    def described(self) -> str:
        """`text`, saying why there is no interval when there is none."""
        if self.interval is None:
            return f"{self.text} (no interval with one seed)"
        return self.text


def own_metric(results: Path, task: str) -> str | None:
    """The metric a task is scored on, as its finetune artifact's manifest records it."""
    try:
        outputs = json.loads((results.parent / MANIFEST_FILE).read_text())["outputs"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    metric = outputs.get(f"{task}.metric") if isinstance(outputs, dict) else None
    return metric if isinstance(metric, str) else None


def read_arm(results: Path, task: str, arm: str, metric: str | None = None) -> ArmScores:
    """An arm's per-seed test scores from a finetune artifact's `results.json`.

    `metric` defaults to the task's own (an NER task's entity_f1, not the first metric its runs
    recorded), read from the artifact's manifest.
    """
    if not results.is_file():
        raise ConfigError(f"{results}: no such file; give a finetune artifact directory")
    tasks = json.loads(results.read_text())
    if task not in tasks:
        raise ConfigError(f"{results}: no task {task!r}; it has {sorted(tasks)}")
    record = tasks[task]
    if arm not in record or "runs" not in record[arm]:
        arms = sorted(name for name, entry in record.items() if "runs" in entry)
        raise ConfigError(f"{results}: task {task!r} has no arm {arm!r}; it has {arms}")
    runs = record[arm]["runs"]
    metrics = list(runs[0]["test"])
    chosen = metric or own_metric(results, task)
    if chosen is None:
        raise ConfigError(
            f"{results.parent}: no {MANIFEST_FILE} says task {task!r}'s metric; name one with "
            f"--metric ({', '.join(metrics)})"
        )
    if chosen not in metrics:
        raise ConfigError(
            f"{results}: {task}/{arm} has no test metric {chosen!r}; it has {metrics}"
        )
    recipe = record.get("recipe", {})
    pool = record.get("caps", {}).get("train_examples", {}).get("of")
    return ArmScores(
        source=f"{results.parent}:{arm}",
        task=task,
        metric=chosen,
        by_seed={int(run["seed"]): float(run["test"][chosen]) for run in runs},
        sampling={**{name: recipe.get(name) for name in SAMPLING_FIELDS}, TRAIN_POOL: pool},
    )


def paired_difference(better: ArmScores, base: ArmScores, confidence: float) -> PairedDifference:
    """`better - base` at each seed; refuses arms that were not scored alike at the same seeds."""
    if (better.task, better.metric) != (base.task, base.metric):
        raise ConfigError(
            f"{better.source} ({better.task} {better.metric}) and {base.source} "
            f"({base.task} {base.metric}) score different things; they cannot pair"
        )
    if sorted(better.by_seed) != sorted(base.by_seed):
        raise ConfigError(
            f"{better.source} has seeds {sorted(better.by_seed)}, {base.source} has "
            f"{sorted(base.by_seed)}; arms pair by seed, so rerun one with the other's "
            "finetune.seeds and seed"
        )
    for name in (*SAMPLING_FIELDS, TRAIN_POOL):
        if better.sampling[name] != base.sampling[name]:
            what = (
                "the train pool a seed's sample is drawn from"
                if name == TRAIN_POOL
                else f"finetune.{name}"
            )
            raise ConfigError(
                f"{what} is {better.sampling[name]} for {better.source} and "
                f"{base.sampling[name]} for {base.source}: the same seed drew different "
                "labelled samples, so the arms cannot pair"
            )
    differences = [better.by_seed[seed] - base.by_seed[seed] for seed in sorted(base.by_seed)]
    return PairedDifference(differences, paired_interval(differences, confidence))
