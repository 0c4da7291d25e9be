"""The lift-vs-compute curve: the lift, with both intervals, at fractions of the pretraining budget.

It answers "how long should I pretrain?": each point is the full evaluation (every seed, each arm
tuned on validation) of the encoder weights kept at that fraction, against the same random-init
runs. Points are flat output keys `<task>.f<fraction>.<field>` (`f0_25`), so MLflow and `python -m
flows.compare` read them back without a schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flows.downstream.statistics.task_figures import TaskFigures

CURVE_STAGE = "lift_curve"  # the stage, and the prefix of its points among a run's metrics
FIELDS = (
    "tokens",
    "lift",
    "ci_low",
    "ci_high",
    "bootstrap_low",
    "bootstrap_high",
    "pretrained_mean",
)


def point(figures: TaskFigures, tokens: int) -> dict[str, float | None]:
    """One task's curve point from a finetune (or checkpoint) evaluation's figures."""
    return {
        "tokens": tokens,
        "lift": figures.lift,
        "ci_low": figures.ci[0],
        "ci_high": figures.ci[1],
        "bootstrap_low": figures.bootstrap[0],
        "bootstrap_high": figures.bootstrap[1],
        "pretrained_mean": figures.pretrained.mean,
    }


def fraction_label(fraction: float) -> str:
    """`f0_25` for 0.25: no dot, so flat keys split cleanly."""
    return f"f{fraction:g}".replace(".", "_")


def flat_points(task: str, points: dict[float, dict[str, float | None]]) -> dict[str, Any]:
    return {
        f"{task}.{fraction_label(fraction)}.{name}": value
        for fraction, fields in points.items()
        for name, value in fields.items()
        if value is not None
    }


def read_points(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, list[dict[str, Any]]]:
    """`{task: [point, ...]}` in token order, from flat keys (optionally under `prefix`)."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for key, value in metrics.items():
        if not key.startswith(prefix):
            continue
        parts = key[len(prefix) :].rsplit(".", 2)
        if len(parts) == 3 and parts[1].startswith("f") and parts[2] in FIELDS:
            found.setdefault(parts[0], {}).setdefault(parts[1], {})[parts[2]] = value
    return {
        task: sorted((p for p in points.values() if "tokens" in p), key=lambda p: p["tokens"])
        for task, points in found.items()
    }


def plot_curves(series: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """Lift against pretraining tokens, one line per series, the paired t-interval as a band and
    the test bootstrap interval as error bars. Draws on a `Figure`, not pyplot: no global state,
    safe in worker threads."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.5, 4.0))
    axes = figure.subplots()
    for label, points in series.items():
        tokens = [p["tokens"] for p in points]
        lifts = [p["lift"] for p in points]
        errors = [
            [p["lift"] - p["bootstrap_low"] for p in points],
            [p["bootstrap_high"] - p["lift"] for p in points],
        ]
        line = axes.errorbar(tokens, lifts, yerr=errors, marker="o", capsize=4, label=label)
        if all("ci_low" in p for p in points):
            axes.fill_between(
                tokens,
                [p["ci_low"] for p in points],
                [p["ci_high"] for p in points],
                alpha=0.15,
                color=line.lines[0].get_color(),
            )
    axes.axhline(0.0, color="black", linewidth=0.8)
    axes.set_xlabel("pretraining tokens")
    axes.set_ylabel("lift over random init")
    axes.set_title("Lift vs pretraining (band: paired t over seeds; bars: test bootstrap)")
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
