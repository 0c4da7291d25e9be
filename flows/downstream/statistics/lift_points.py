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

from flows.downstream.statistics.base_report import OVER_BASE
from flows.downstream.statistics.task_figures import TaskFigures

CURVE_STAGE = "lift_curve"  # the stage, and the prefix of its points among a run's metrics
LIFT = "lift"  # pretrained over random init
MEASURES = (LIFT, OVER_BASE)  # OVER_BASE: adapted over the checkpoint, for a continuation


def interval_keys(measure: str) -> tuple[str, str, str, str, str]:
    """A point's keys for `measure`: its value, paired-t interval and bootstrap interval (the
    lift's keep their first names, so stored curves still read)."""
    prefix = "" if measure == LIFT else f"{measure}_"
    return (
        measure,
        f"{prefix}ci_low",
        f"{prefix}ci_high",
        f"{prefix}bootstrap_low",
        f"{prefix}bootstrap_high",
    )


FIELDS = (
    "tokens",
    "pretrained_mean",
    "pretrained_validation",
    *(key for measure in MEASURES for key in interval_keys(measure)),
)


def point(figures: TaskFigures, tokens: int) -> dict[str, float | None]:
    """One task's curve point from a finetune (or checkpoint) evaluation's figures; with a base
    arm (a continued checkpoint), adapted over base beside the lift."""
    validation = f"pretrained_validation_{figures.metric}_mean"
    fields: dict[str, float | None] = {
        "tokens": tokens,
        "lift": figures.lift,
        "ci_low": figures.ci[0],
        "ci_high": figures.ci[1],
        "bootstrap_low": figures.bootstrap[0],
        "bootstrap_high": figures.bootstrap[1],
        "pretrained_mean": figures.pretrained.mean,
        # What choosing the budget reads: test figures are reported, never chosen on.
        "pretrained_validation": figures.metrics.get(validation),
    }
    over = f"{OVER_BASE}_{figures.metric}"
    if over in figures.metrics:
        ends = ("", "_ci_low", "_ci_high", "_bootstrap_low", "_bootstrap_high")
        for key, end in zip(interval_keys(OVER_BASE), ends, strict=True):
            fields[key] = figures.metrics.get(over + end)
    return fields


def chosen_on_validation(points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The point whose pretrained (adapted) arm scored best on validation, the earliest of
    equals (the cheaper budget); None for a curve stored before points kept that score."""
    scored = [p for p in points if p.get("pretrained_validation") is not None]
    if not scored:
        return None
    return max(scored, key=lambda p: (p["pretrained_validation"], -p["tokens"]))


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


def plot_curves(series: dict[str, list[dict[str, Any]]], path: Path, measure: str = LIFT) -> None:
    """`measure` (the lift, or adapted over base) against pretraining tokens, one line per
    series, the paired t-interval as a band and the test bootstrap interval as error bars. Draws
    on a `Figure`, not pyplot: no global state, safe in worker threads."""
    from matplotlib.figure import Figure

    value, ci_low, ci_high, low, high = interval_keys(measure)
    figure = Figure(figsize=(6.5, 4.0))
    axes = figure.subplots()
    for label, points in series.items():
        tokens = [p["tokens"] for p in points]
        values = [p[value] for p in points]
        errors = [[p[value] - p[low] for p in points], [p[high] - p[value] for p in points]]
        line = axes.errorbar(tokens, values, yerr=errors, marker="o", capsize=4, label=label)
        if all(ci_low in p for p in points):
            axes.fill_between(
                tokens,
                [p[ci_low] for p in points],
                [p[ci_high] for p in points],
                alpha=0.15,
                color=line.lines[0].get_color(),
            )
    axes.axhline(0.0, color="black", linewidth=0.8)
    axes.set_xlabel("pretraining tokens")
    axes.set_ylabel("lift over random init" if measure == LIFT else "adapted over base")
    axes.set_title("Lift vs pretraining (band: paired t over seeds; bars: test bootstrap)")
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
