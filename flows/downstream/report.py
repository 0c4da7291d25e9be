"""Per-seed scores to the figures a reader trusts: mean, std, the lift and its confidence intervals.

The lift has two intervals, because it has two sources of noise:
- a Student t-interval over the *paired* per-seed differences (pretrained minus random init at the
  same seed): the seed fixes the head init, data order and labelled sample of both arms, so
  pairing removes that shared noise. With one seed there is no t-interval and none is reported;
- a paired bootstrap over test examples (bootstrap.py): the noise of a finite test split.
Baselines without an encoder sit beside both arms, so a reader sees whether the encoder beats a bag
of words; runs whose best epoch was the last allowed are counted, so a capped arm is visible, and an
arm that chose an end of its learning-rate grid is flagged.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from flows.downstream.settings import recipe_key
from flows.downstream.spec import ARMS

if TYPE_CHECKING:
    from flows.downstream.baselines import BaselineResult
    from flows.downstream.recipe import ArmResult

ARM_NAMES = {"pretrained": "pretrained", "random_init": "random init"}


def paired_interval(differences: list[float], confidence: float) -> tuple[float, float] | None:
    """`mean ± t(n-1) * sd / sqrt(n)`; None with fewer than two pairs."""
    from scipy import stats

    if len(differences) < 2:
        return None
    mean = statistics.fmean(differences)
    half = stats.t.ppf((1 + confidence) / 2, len(differences) - 1) * statistics.stdev(differences)
    half /= math.sqrt(len(differences))
    return mean - half, mean + half


def std(values: list[float]) -> float:
    """Sample standard deviation across seeds; 0 for a single seed."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def baseline_outputs(
    task: str, metric: str, baselines: dict[str, BaselineResult]
) -> dict[str, Any]:
    """`<task>.baseline_<name>_<metric>_mean|_std` (over train samples: one per seed, or one)."""
    outputs: dict[str, Any] = {f"{task}.baselines": ",".join(baselines)}
    for name, result in baselines.items():
        scores = [test[metric] for test in result.test]
        outputs[f"{task}.baseline_{name}_{metric}_mean"] = statistics.fmean(scores)
        outputs[f"{task}.baseline_{name}_{metric}_std"] = std(scores)
    return outputs


def task_outputs(
    task: str,
    metric: str,
    arms: dict[str, ArmResult],
    confidence: float,
    max_epochs: int,
) -> dict[str, Any]:
    """The flat `<task>.*` keys of the stage's outputs (listed in docs/guides/downstream.md)."""
    outputs: dict[str, Any] = {
        f"{task}.metric": metric,
        f"{task}.seeds": len(arms["pretrained"].runs),
        f"{task}.max_epochs": max_epochs,
    }
    for arm in ARMS:
        result = arms[arm]
        outputs[f"{task}.{arm}_learning_rate"] = result.learning_rate
        outputs[f"{task}.{arm}_epochs_mean"] = statistics.fmean(r.best_epoch for r in result.runs)
        outputs[f"{task}.{arm}_capped_runs"] = sum(r.capped for r in result.runs)
        outputs[f"{task}.{arm}_grid_edge"] = result.grid_edge or ""
        outputs[f"{task}.{arm}_validation_{metric}_mean"] = statistics.fmean(
            r.validation_score for r in result.runs
        )
    for name in arms["pretrained"].runs[0].test:
        scores = {arm: [run.test[name] for run in arms[arm].runs] for arm in ARMS}
        for arm in ARMS:
            outputs[f"{task}.{arm}_{name}_mean"] = statistics.fmean(scores[arm])
            outputs[f"{task}.{arm}_{name}_std"] = std(scores[arm])
        differences = [
            p - r for p, r in zip(scores["pretrained"], scores["random_init"], strict=True)
        ]
        outputs[f"{task}.lift_{name}"] = statistics.fmean(differences)
        interval = paired_interval(differences, confidence)
        if interval is not None:
            outputs[f"{task}.lift_{name}_ci_low"], outputs[f"{task}.lift_{name}_ci_high"] = interval
    return outputs


def headline(outputs: dict[str, Any], task: str) -> dict[str, Any]:
    """The task's configured metric, for tables and charts."""
    metric = outputs[f"{task}.metric"]
    return {
        "metric": metric,
        **{
            f"{arm}_{stat}": outputs[f"{task}.{arm}_{metric}_{stat}"]
            for arm in ARMS
            for stat in ("mean", "std")
        },
        "lift": outputs[f"{task}.lift_{metric}"],
        "ci": (
            outputs.get(f"{task}.lift_{metric}_ci_low"),
            outputs.get(f"{task}.lift_{metric}_ci_high"),
        ),
        "bootstrap": (
            outputs[f"{task}.lift_{metric}_bootstrap_low"],
            outputs[f"{task}.lift_{metric}_bootstrap_high"],
        ),
        "baselines": {
            name: outputs[f"{task}.baseline_{name}_{metric}_mean"]
            for name in filter(None, outputs[f"{task}.baselines"].split(","))
        },
        "capped": {arm: outputs[f"{task}.{arm}_capped_runs"] for arm in ARMS},
        "grid_edge": {arm: outputs[f"{task}.{arm}_grid_edge"] for arm in ARMS},
    }


def interval_text(interval: tuple[float | None, float | None]) -> str:
    low, high = interval
    return "none (one seed)" if low is None or high is None else f"[{low:+.3f}, {high:+.3f}]"


def baselines_text(baselines: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.3f}" for name, value in baselines.items()) or "none"


def task_key(outputs: dict[str, Any], task: str, field: str) -> str:
    """The config key that sets a recipe field for `task` (settings.recipe_key)."""
    return recipe_key(task, field, outputs[f"{task}.recipe_set_by_task"].split(","))


def capped_warning(outputs: dict[str, Any], task: str) -> str | None:
    """A line for a task where some run's best epoch was the last allowed; None when none was."""
    capped = headline(outputs, task)["capped"]
    if not any(capped.values()):
        return None
    runs = ", ".join(
        f"{ARM_NAMES[arm]} {count} of {outputs[f'{task}.seeds']}" for arm, count in capped.items()
    )
    return (
        f"CAPPED {task}: the best validation epoch was the last allowed "
        f"({task_key(outputs, task, 'epochs')}={outputs[f'{task}.max_epochs']}) in {runs} runs; "
        f"those runs may still have been improving: raise {task_key(outputs, task, 'epochs')}"
    )


def grid_edge_warning(outputs: dict[str, Any], task: str) -> str | None:
    """A line for a task where an arm chose the lowest or highest rate of its grid."""
    edges = {arm: edge for arm, edge in headline(outputs, task)["grid_edge"].items() if edge}
    if not edges:
        return None
    key = task_key(outputs, task, "learning_rates")
    chosen = ", ".join(
        f"{ARM_NAMES[arm]} chose {outputs[f'{task}.{arm}_learning_rate']:g}, the {edge} rate"
        for arm, edge in edges.items()
    )
    return (
        f"GRID EDGE {task}: {chosen} of {key}; the best rate may lie outside the grid: extend "
        f"{key} past that end"
    )


def warnings(outputs: dict[str, Any], task: str) -> list[str]:
    """The task's flags, in the summary and summary.md: caps that bit, and results that call for
    a change of recipe."""
    caps = outputs[f"{task}.caps"]
    found = (
        f"CAPS {task}: {caps}" if caps else None,
        capped_warning(outputs, task),
        grid_edge_warning(outputs, task),
    )
    return [warning for warning in found if warning is not None]


def markdown_table(outputs: dict[str, Any], tasks: list[str], confidence: float) -> str:
    level = f"{confidence:.0%}"
    rows = [
        f"| task | metric | pretrained | random init | lift | {level} CI, paired t (seeds) | "
        f"{level} CI, bootstrap (test) | baselines | lr (pre / rand) | epochs (pre / rand) | "
        "capped runs (pre / rand) | seeds | train examples |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task in tasks:
        line = headline(outputs, task)
        rows.append(
            f"| {task} | {line['metric']} | "
            f"{line['pretrained_mean']:.3f} ± {line['pretrained_std']:.3f} | "
            f"{line['random_init_mean']:.3f} ± {line['random_init_std']:.3f} | "
            f"{line['lift']:+.3f} | {interval_text(line['ci'])} | "
            f"{interval_text(line['bootstrap'])} | {baselines_text(line['baselines'])} | "
            f"{outputs[f'{task}.pretrained_learning_rate']:g} / "
            f"{outputs[f'{task}.random_init_learning_rate']:g} | "
            f"{outputs[f'{task}.pretrained_epochs_mean']:.1f} / "
            f"{outputs[f'{task}.random_init_epochs_mean']:.1f} | "
            f"{line['capped']['pretrained']} / {line['capped']['random_init']} | "
            f"{outputs[f'{task}.seeds']} | {outputs[f'{task}.train_examples']} |"
        )
    rows.append("")
    rows.append(
        "Mean ± sample std over seeds, on each task's test split (GLUE: its dev file). Each arm's "
        "learning rate and epoch were chosen on the validation split; baselines (no encoder) "
        "were fitted on the same labelled examples, their choices made on validation too."
    )
    rows.append("\nRecipes (a task's catalog entry may set fields over `finetune.*`):\n")
    rows.extend(f"- {task}: {outputs[f'{task}.recipe']}" for task in tasks)
    rows.extend(f"\n**{warning}**" for task in tasks for warning in warnings(outputs, task))
    return "\n".join(rows)


def bar_chart(outputs: dict[str, Any], tasks: list[str], path: Path) -> None:
    """Pretrained against random init per task, error bars = std over seeds; each baseline is a
    black reference line across its task's bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [headline(outputs, task) for task in tasks]
    figure, axes = plt.subplots(figsize=(max(5.5, 1.6 * len(tasks) + 2), 3.8))
    width = 0.38
    for offset, arm in enumerate(ARMS):
        positions = [index + (offset - 0.5) * width for index in range(len(tasks))]
        axes.bar(
            positions,
            [line[f"{arm}_mean"] for line in lines],
            width,
            yerr=[line[f"{arm}_std"] for line in lines],
            capsize=4,
            label=ARM_NAMES[arm],
        )
    styles: list[Literal["--", ":", "-."]] = ["--", ":", "-."]
    names = list(dict.fromkeys(name for line in lines for name in line["baselines"]))
    for index, line in enumerate(lines):
        for name, value in line["baselines"].items():
            first = all(name not in other["baselines"] for other in lines[:index])
            axes.hlines(
                value,
                index - 1.2 * width,
                index + 1.2 * width,
                colors="black",
                linestyles=styles[names.index(name) % len(styles)],
                label=f"baseline: {name}" if first else "_nolegend_",
            )
    axes.set_xticks(range(len(tasks)))
    axes.set_xticklabels(
        [f"{task}\n({line['metric']})" for task, line in zip(tasks, lines, strict=True)]
    )
    axes.set_ylabel("test score (mean ± std over seeds)")
    axes.set_title("Pretrained vs random init")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
