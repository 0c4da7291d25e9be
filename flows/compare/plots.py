"""The charts of `python -m flows.compare`: overlaid pretraining loss curves and lift bars.

Pure functions of already-fetched data, so they are tested without a tracking store. They draw on
`matplotlib.figure.Figure` directly, not pyplot: no global figure state and no display backend,
which keeps them safe inside Prefect worker threads and on headless machines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from flows.downstream.tasks.spec import ARMS

Curve = list[tuple[int, float]]
LOSS_KEYS = ("train/loss", "val/loss")

# `finetune.pretrained_accuracy`, `finetune.topics.random_init_macro_f1_mean`, `..._std`: the arm,
# the metric, and an optional statistic over seeds. The pattern, not a fixed list, so new tasks
# and metrics appear in the chart without a change here.
ARM_METRIC = re.compile(
    rf"^(?P<group>(?:.+\.)?)(?P<arm>{'|'.join(ARMS)})_(?P<metric>.+?)(?:_(?P<stat>mean|std))?$"
)
LIFT = re.compile(r"^(?P<group>(?:.+\.)?)lift_(?P<metric>.+)$")


@dataclass(frozen=True)
class LiftPanel:
    """One metric of one task: per run, the value and error bar of each arm (None: not logged)."""

    title: str
    values: dict[str, list[float | None]]  # arm -> one value per run
    errors: dict[str, list[float | None]]  # arm -> one std per run


def lift_panels(run_metrics: Sequence[Mapping[str, float]]) -> list[LiftPanel]:
    """Every (task, metric) with both arms and a logged lift in some run, in name order.

    Requiring `lift_<metric>` keeps the arms' side figures (`pretrained_epochs_mean`,
    `pretrained_learning_rate`) out: only scores get a lift.
    """
    scores = {
        (match["group"].rstrip("."), match["metric"])
        for metrics in run_metrics
        for key in metrics
        if (match := LIFT.match(key))
    }
    found: dict[tuple[str, str], dict[tuple[str, str], list[float | None]]] = {}
    for index, metrics in enumerate(run_metrics):
        for key, value in metrics.items():
            match = ARM_METRIC.match(key)
            if match is None:
                continue
            panel = found.setdefault((match["group"].rstrip("."), match["metric"]), {})
            kind = "error" if match["stat"] == "std" else "value"
            slots = panel.setdefault((match["arm"], kind), [None] * len(run_metrics))
            slots[index] = value
    panels = []
    for (group, metric), series in sorted(found.items()):
        if (group, metric) not in scores or not all((arm, "value") in series for arm in ARMS):
            continue
        if not any(series[(arm, "value")][i] for arm in ARMS for i in range(len(run_metrics))):
            continue  # every bar 0 (e.g. an F1 no run reached): an empty panel says nothing
        empty: list[float | None] = [None] * len(run_metrics)
        panels.append(
            LiftPanel(
                title=f"{group} {metric}".strip(),
                values={arm: series[(arm, "value")] for arm in ARMS},
                errors={arm: series.get((arm, "error"), empty) for arm in ARMS},
            )
        )
    return panels


def plot_lift(labels: Sequence[str], panels: Sequence[LiftPanel], path: Path) -> int:
    """Grouped bars, pretrained beside random init, per run; returns the number of bars drawn."""
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure = Figure(figsize=(max(4.0, 1.2 * len(labels) + 2) * columns, 3.6 * rows))
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    width = 0.38
    drawn = 0
    for axis, panel in zip(axes, panels, strict=False):
        for offset, arm in ((-width / 2, "pretrained"), (width / 2, "random_init")):
            xs = [i + offset for i, v in enumerate(panel.values[arm]) if v is not None]
            heights = [v for v in panel.values[arm] if v is not None]
            errors = [
                e or 0.0
                for v, e in zip(panel.values[arm], panel.errors[arm], strict=True)
                if v is not None
            ]
            has_errors = any(panel.errors[arm])
            color = "C0" if arm == "pretrained" else "C1"
            axis.bar(
                xs, heights, width, yerr=errors if has_errors else None, capsize=3, color=color
            )
            drawn += len(heights)
        axis.set_xticks(range(len(labels)), labels, rotation=20, fontsize=8)
        axis.set_xlim(-0.8, len(labels) - 0.2)  # a lone run's bars stay bar-sized
        axis.set_title(panel.title)
    for axis in axes[len(panels) :]:
        axis.set_visible(False)
    # One legend for all panels, in its own strip under the title: never over a bar.
    height = figure.get_figheight()
    figure.suptitle("Pretraining lift: pretrained vs random init", y=1 - 0.1 / height)
    handles = [Patch(color="C0", label="pretrained"), Patch(color="C1", label="random init")]
    figure.legend(
        handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.4 / height), ncol=2
    )
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.62 / height))
    figure.savefig(path, dpi=100)
    return drawn


def plot_loss_curves(curves: Mapping[str, Mapping[str, Curve]], path: Path) -> dict[str, int]:
    """One panel per loss key, one line per run; returns how many lines each panel got."""
    figure = Figure(figsize=(11, 4))
    axes = figure.subplots(1, len(LOSS_KEYS), squeeze=False).ravel()
    counts = dict.fromkeys(LOSS_KEYS, 0)
    for color, (label, history) in enumerate(curves.items()):
        for axis, key in zip(axes, LOSS_KEYS, strict=True):
            points = sorted(history.get(key, []))
            if not points:
                continue
            steps, values = zip(*points, strict=True)
            marker = "o" if len(points) < 20 else None
            axis.plot(steps, values, color=f"C{color}", marker=marker, markersize=3, label=label)
            counts[key] += 1
    for axis, key in zip(axes, LOSS_KEYS, strict=True):
        axis.set_title(f"pretraining {key}")
        axis.set_xlabel("step")
        axis.set_ylabel("loss")
        if counts[key]:
            axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    return counts
