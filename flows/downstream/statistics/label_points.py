"""The label-efficiency curve: each arm's score, and the lift, against labelled examples per seed.

"Pretrained encoders transfer with limited labelled data" is a claim about a curve: where
pretraining pays most, and from how many labels on random init catches up. Each point is a full
evaluation of the task at one count (flows/stages/label_curve.py). Points are flat output keys
`<task>.n<count>.<field>` (`n100`, `nall` for the whole pool), so MLflow and `python -m
flows.compare` read them back without a schema.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flows.core.tables import markdown_table
from flows.downstream.statistics.report import ARM_NAMES
from flows.downstream.statistics.task_figures import TaskFigures


def count_label(count: int | None) -> str:
    """`n100`, or `nall` for the whole pool: no dot, so flat keys split cleanly."""
    return f"n{'all' if count is None else count}"


def arm_interval(mean: float, std: float, seeds: int, confidence: float) -> tuple[float, float]:
    """Student t-interval of an arm's mean over seeds (the band around its line)."""
    from scipy import stats

    if seeds < 2:
        return mean, mean
    half = stats.t.ppf((1 + confidence) / 2, seeds - 1) * std / math.sqrt(seeds)
    return mean - half, mean + half


def point(figures: TaskFigures, confidence: float) -> dict[str, float]:
    """One task's point at one count: labels per seed, each arm's mean, std and interval, the
    lift with both intervals, each baseline's mean."""
    values: dict[str, float | None] = {
        "labels": figures.train_examples,
        "lift": figures.lift,
        "ci_low": figures.ci[0],
        "ci_high": figures.ci[1],
        "bootstrap_low": figures.bootstrap[0],
        "bootstrap_high": figures.bootstrap[1],
    }
    for arm, scores in figures.arms.items():
        low, high = arm_interval(scores.mean, scores.std, figures.seeds, confidence)
        values[f"{arm}_mean"], values[f"{arm}_std"] = scores.mean, scores.std
        values[f"{arm}_low"], values[f"{arm}_high"] = low, high
    values.update({f"baseline_{name}": value for name, value in figures.baselines.items()})
    return {name: value for name, value in values.items() if value is not None}


def flat_points(task: str, points: dict[int | None, dict[str, float]]) -> dict[str, float]:
    return {
        f"{task}.{count_label(count)}.{name}": value
        for count, fields in points.items()
        for name, value in fields.items()
    }


def read_label_points(outputs: Mapping[str, Any]) -> dict[str, list[dict[str, float]]]:
    """`{task: [point, ...]}` by labels, from the flat keys of a label_curve artifact."""
    found: dict[str, dict[str, dict[str, float]]] = {}
    for key, value in outputs.items():
        parts = key.rsplit(".", 2)
        if len(parts) == 3 and parts[1].startswith("n") and isinstance(value, int | float):
            found.setdefault(parts[0], {}).setdefault(parts[1], {})[parts[2]] = value
    return {
        task: sorted((p for p in points.values() if "labels" in p), key=lambda p: p["labels"])
        for task, points in found.items()
    }


def arms_of(points: list[dict[str, float]]) -> list[str]:
    """The arms a curve's points hold (`<arm>_mean`), pretrained first."""
    names = [name.removesuffix("_mean") for name in points[0] if name.endswith("_mean")]
    return sorted(names, key=lambda arm: (arm != "pretrained", arm))


def excludes_zero(point: dict[str, float]) -> bool:
    """Whether the lift's interval excludes zero: the paired t over seeds, or with one seed the
    test bootstrap."""
    low, high = (
        (point["ci_low"], point["ci_high"])
        if "ci_low" in point
        else (point["bootstrap_low"], point["bootstrap_high"])
    )
    return low > 0 or high < 0


def labels_text(point: dict[str, float], count: str) -> str:
    return f"{int(point['labels'])} labels" + (" (all)" if count == "nall" else "")


def counts_text(points: list[dict[str, float]]) -> str:
    """`32, 100 and 300`."""
    counts = [f"{int(p['labels'])}" for p in points]
    return counts[0] if len(counts) == 1 else f"{', '.join(counts[:-1])} and {counts[-1]}"


def crossing(points: list[dict[str, float]], confidence: float) -> str:
    """The sentence naming the smallest count at which the lift's interval no longer excludes
    zero, or that it excludes zero at every count run."""
    interval = (
        f"The lift's {confidence:.0%} interval "
        f"({'paired t over seeds' if 'ci_low' in points[0] else 'test bootstrap'})"
    )
    including = [p for p in points if not excludes_zero(p)]
    excluding = [p for p in points if excludes_zero(p)]
    first_count, last_count = int(points[0]["labels"]), int(points[-1]["labels"])
    span = f"{first_count} labels" if len(points) == 1 else f"{first_count} to {last_count} labels"
    if not including:
        return f"{interval} excludes zero at every count run, {span}."
    if not excluding:
        return f"{interval} includes zero at every count run, {span}."
    first = including[0]
    if all(not excludes_zero(p) for p in points[points.index(first) :]):
        return (
            f"{interval} excludes zero up to {counts_text(excluding)} labels and no longer from "
            f"{int(first['labels'])} labels on."
        )
    where = (
        f"{int(first['labels'])} labels only"
        if len(including) == 1
        else f"{counts_text(including)} labels, first at {int(first['labels'])}"
    )
    return (
        f"{interval} includes zero at {where}, and excludes it at {counts_text(excluding)} labels."
    )


def point_line(point: dict[str, float]) -> str:
    """`pretrained 0.412 ± 0.020, random init 0.301 ± 0.015; lift +0.111 [+0.080, +0.142];
    tfidf_logreg 0.350`."""
    arms = ", ".join(
        f"{ARM_NAMES.get(arm, arm)} {point[f'{arm}_mean']:.3f} ± {point[f'{arm}_std']:.3f}"
        for arm in arms_of([point])
    )
    interval = (
        f" [{point['ci_low']:+.3f}, {point['ci_high']:+.3f}]"
        if "ci_low" in point
        else " (one seed)"
    )
    baselines = ", ".join(
        f"{name.removeprefix('baseline_')} {value:.3f}"
        for name, value in point.items()
        if name.startswith("baseline_")
    )
    return f"{arms}; lift {point['lift']:+.3f}{interval}" + (f"; {baselines}" if baselines else "")


def markdown(curves: dict[str, list[dict[str, float]]], metrics: dict[str, str], level: str) -> str:
    """A table per task (labels, each arm, the lift and its intervals, baselines) and the
    sentence that reads it."""
    sections = []
    for task, points in curves.items():
        arms = arms_of(points)
        baselines = [name for name in points[0] if name.startswith("baseline_")]
        header = [
            "labels per seed",
            *(ARM_NAMES.get(arm, arm) for arm in arms),
            "lift",
            f"{level} CI, paired t (seeds)",
            f"{level} CI, bootstrap (test)",
            *(name.removeprefix("baseline_") for name in baselines),
        ]
        rows = [
            [
                f"{int(p['labels'])}",
                *(f"{p[f'{arm}_mean']:.3f} ± {p[f'{arm}_std']:.3f}" for arm in arms),
                f"{p['lift']:+.3f}",
                f"[{p['ci_low']:+.3f}, {p['ci_high']:+.3f}]" if "ci_low" in p else "none",
                f"[{p['bootstrap_low']:+.3f}, {p['bootstrap_high']:+.3f}]",
                *(f"{p[name]:.3f}" for name in baselines),
            ]
            for p in points
        ]
        sections.append(f"### {task} ({metrics[task]})\n\n" + markdown_table(header, rows))
    return "\n\n".join(sections)


def plot(
    curves: dict[str, list[dict[str, float]]], metrics: dict[str, str], level: str, path: Path
) -> None:
    """A panel per task: each arm's test score against labels per seed (log axis), its
    t-interval over seeds as a band, each baseline dashed. Draws on a `Figure`, not pyplot."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.0 * len(curves), 4.2))
    panels = figure.subplots(1, len(curves), squeeze=False)[0]
    for axes, (task, points) in zip(panels, curves.items(), strict=True):
        labels = [p["labels"] for p in points]
        for arm in arms_of(points):
            line = axes.plot(
                labels,
                [p[f"{arm}_mean"] for p in points],
                marker="o",
                label=ARM_NAMES.get(arm, arm),
            )[0]
            axes.fill_between(
                labels,
                [p[f"{arm}_low"] for p in points],
                [p[f"{arm}_high"] for p in points],
                alpha=0.2,
                color=line.get_color(),
            )
        for name in (name for name in points[0] if name.startswith("baseline_")):
            baseline = name.removeprefix("baseline_")
            style = "k--" if baseline == "tfidf_logreg" else "k:"
            axes.plot(labels, [p[name] for p in points], style, label=f"baseline: {baseline}")
        axes.set_xscale("log")
        axes.set_xlabel("labelled examples per seed")
        axes.set_ylabel(f"test {metrics[task]}")
        axes.set_title(f"{task} (bands: {level} t-interval over seeds)", fontsize="medium")
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
