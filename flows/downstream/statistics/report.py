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

from flows.core import tables
from flows.downstream.statistics.task_figures import TaskFigures
from flows.downstream.tasks.spec import ARMS, BASE_ARM, recipe_key

if TYPE_CHECKING:
    from flows.downstream.finetuning.results import ArmResult, BaselineResult

ARM_NAMES = {"pretrained": "pretrained", "random_init": "random init", BASE_ARM: "base"}


def paired_interval(differences: list[float], confidence: float) -> tuple[float, float] | None:
    """`mean ± t(n-1) * sd / sqrt(n)`; None with fewer than two pairs."""
    from scipy import stats

    if len(differences) < 2:
        return None
    mean = statistics.fmean(differences)
    half = stats.t.ppf((1 + confidence) / 2, len(differences) - 1) * statistics.stdev(differences)
    half /= math.sqrt(len(differences))
    return mean - half, mean + half


def ratio_interval(
    numerators: list[float], denominators: list[float], confidence: float
) -> tuple[float, float] | None:
    """Fieller's interval for `mean(numerators) / mean(denominators)` over paired seeds.

    A share of a lift (the student's lift over the teacher's) is a ratio of two noisy means; its
    interval is every ratio R that the paired t-test does not reject, i.e. where
    `(mean(a) - R mean(b))^2 <= t^2 var(a - R b) / n`, a quadratic in R. It is a bounded interval
    only when the denominator itself is significantly non-zero at the same level; otherwise the
    set is unbounded and None is returned: a share of a lift that may be nothing is undefined.
    None also for fewer than two pairs.
    """
    from scipy import stats

    count = len(numerators)
    if count < 2:
        return None
    a, b = statistics.fmean(numerators), statistics.fmean(denominators)
    covariance = statistics.covariance(numerators, denominators)
    t_squared = stats.t.ppf((1 + confidence) / 2, count - 1) ** 2 / count
    quadratic = b * b - t_squared * statistics.variance(denominators)
    if quadratic <= 0:
        return None
    linear = a * b - t_squared * covariance
    constant = a * a - t_squared * statistics.variance(numerators)
    half = math.sqrt(max(linear * linear - quadratic * constant, 0.0))
    return (linear - half) / quadratic, (linear + half) / quadratic


def paired_figures(differences: list[float], confidence: float, key: str) -> dict[str, float]:
    """`key` (the mean paired difference) and, with two pairs or more, `key_ci_low`/`_ci_high`."""
    figures = {key: statistics.fmean(differences)}
    interval = paired_interval(differences, confidence)
    if interval is not None:
        figures[f"{key}_ci_low"], figures[f"{key}_ci_high"] = interval
    return figures


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
    pretrained_max_epochs: int | None = None,
) -> dict[str, Any]:
    """The flat `<task>.*` keys of the stage's outputs (listed in docs/downstream-reference.md).
    `pretrained_max_epochs`: the pretrained arm's own limit when it starts from a public
    checkpoint (`finetune.pretrained_epochs`); None: the task's `max_epochs` bounds it too."""
    outputs: dict[str, Any] = {
        f"{task}.metric": metric,
        f"{task}.seeds": len(arms["pretrained"].runs),
        f"{task}.max_epochs": max_epochs,
    }
    if pretrained_max_epochs is not None:
        outputs[f"{task}.pretrained_max_epochs"] = pretrained_max_epochs
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


def interval_text(interval: tuple[float | None, float | None]) -> str:
    low, high = interval
    return "none (one seed)" if low is None or high is None else f"[{low:+.3f}, {high:+.3f}]"


def baselines_text(baselines: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.3f}" for name, value in baselines.items()) or "none"


def task_key(figures: TaskFigures, field: str) -> str:
    """The config key that sets a recipe field for the task (settings.recipe_key)."""
    return recipe_key(figures.task, field, figures.recipe_set_by_task)


def arm_name(figures: TaskFigures, arm: str) -> str:
    """An arm as a line names it: `cloze evaluate`'s pretrained arm is the checkpoint as it is,
    its `base`."""
    return "base" if figures.evaluated and arm == "pretrained" else ARM_NAMES[arm]


def arm_key(figures: TaskFigures, arm: str, field: str) -> str:
    """The key that sets `field` (`learning_rates` or `epochs`) for an arm: an arm starting
    from a public checkpoint is tuned on `pretrained_<field>` (TaskRecipe.grid)."""
    own = arm == BASE_ARM or (figures.from_checkpoint and arm == "pretrained")
    return task_key(figures, f"pretrained_{field}" if own else field)


def epoch_limit(figures: TaskFigures, arm: str) -> str:
    """`finetune.epochs=20`: the key that bounds an arm's epochs, with its value when known
    (an artifact from before `pretrained_max_epochs` was written lacks it)."""
    key = arm_key(figures, arm, "epochs")
    if arm == BASE_ARM or (figures.from_checkpoint and arm == "pretrained"):
        limit = figures.metrics.get("pretrained_max_epochs")
        return key if limit is None else f"{key}={limit}"
    return f"{key}={figures.max_epochs}"


def capped_warning(figures: TaskFigures) -> str | None:
    """A line for a task where some run's best epoch was the last allowed, naming the key that
    bounds each arm's epochs; None when none was."""
    capped = {arm: picked.capped_runs for arm, picked in figures.tuned_arms.items()}
    if not any(capped.values()):
        return None
    by_limit: dict[str, list[str]] = {}
    for arm, count in capped.items():
        by_limit.setdefault(epoch_limit(figures, arm), []).append(
            f"{arm_name(figures, arm)} {count} of {figures.seeds}"
        )
    runs = ", ".join(f"({limit}) in {', '.join(arms)} runs" for limit, arms in by_limit.items())
    raise_keys = dict.fromkeys(arm_key(figures, arm, "epochs") for arm in capped if capped[arm])
    return (
        f"CAPPED {figures.task}: the best validation epoch was the last allowed {runs}; those "
        f"runs may still have been improving: raise {' and '.join(raise_keys)}"
    )


def grid_edge_warning(figures: TaskFigures) -> str | None:
    """A line for a task where an arm chose the lowest or highest rate of its grid, naming
    the key of that arm's own grid; or where every rate of an arm's grid tied on validation,
    saying how the rate was chosen instead (a QA task: on validation span F1)."""
    edges = {arm: picked for arm, picked in figures.tuned_arms.items() if picked.grid_edge}
    if not edges:
        return None
    keys = {arm: arm_key(figures, arm, "learning_rates") for arm in edges}
    spans = "pretrained_span_f1_mean" in figures.metrics  # a QA task breaks ties on them
    how = "chosen on validation span F1" if spans else "taken as the first"
    parts = [
        f"{arm_name(figures, arm)}: every rate of {keys[arm]} tied on validation {figures.metric}, "
        f"{picked.learning_rate:g} {how}"
        if picked.grid_edge == "tied"
        else f"{arm_name(figures, arm)} chose {picked.learning_rate:g}, the {picked.grid_edge} "
        f"rate of {keys[arm]}"
        for arm, picked in edges.items()
    ]
    ends = [keys[arm] for arm, arm_figures in edges.items() if arm_figures.grid_edge != "tied"]
    extend = " and ".join(dict.fromkeys(ends))
    advice = (
        f"the best rate may lie outside the grid: extend {extend} past that end "
        "(finetune.grid_extensions does it on validation)"
        if ends
        else f"validation {figures.metric} told no rate apart"
    )
    return f"GRID EDGE {figures.task}: {'; '.join(parts)}; {advice}"


def uninformative_warning(figures: TaskFigures) -> str | None:
    """A line for a task that cannot tell the encoders apart: a baseline already scores the
    most the metric can be (the no-answer baseline on a test split of unanswerable questions
    only), or every arm scores what a baseline scores (too few labels, or a head that never
    learned)."""
    task, metric = figures.task, figures.metric
    for name, value in figures.baselines.items():
        if value >= 1 - 1e-9:
            why = " (every test question is unanswerable)" if name == "no_answer" else ""
            return (
                f"UNINFORMATIVE {task}: the {name} baseline scores {value:.3f}, the most {metric} "
                f"can be{why}; no arm can beat it, so no difference between the arms means "
                "anything"
            )
    means = [figures.arms[arm].mean for arm in ARMS]
    for name, value in figures.baselines.items():
        if all(abs(mean - value) <= 1e-9 for mean in means):
            return (
                f"UNINFORMATIVE {task}: every arm scores the {name} baseline's {value:.3f}; no "
                "arm learned the task, so no difference between them means anything"
            )
    return None


def warnings(figures: TaskFigures) -> list[str]:
    """The task's flags, in the summary and summary.md: caps that bit, and results that call for
    a change of recipe."""
    found = (
        f"CAPS {figures.task}: {figures.caps}" if figures.caps else None,
        uninformative_warning(figures),
        capped_warning(figures),
        grid_edge_warning(figures),
    )
    return [warning for warning in found if warning is not None]


def markdown_table(tasks: list[TaskFigures], confidence: float) -> str:
    level = f"{confidence:.0%}"
    header = [
        "task",
        "metric",
        "pretrained",
        "random init",
        "lift",
        f"{level} CI, paired t (seeds)",
        f"{level} CI, bootstrap (test)",
        "baselines",
        "lr (pre / rand)",
        "epochs (pre / rand)",
        "capped runs (pre / rand)",
        "seeds",
        "train examples",
    ]
    rows = [tables.markdown_table(header, [lift_row(line) for line in tasks]), ""]
    rows.append(
        "Mean ± sample std over seeds, on each task's test split (GLUE: its dev file). Each arm's "
        "learning rate and epoch were chosen on the validation split; baselines (no encoder) "
        "were fitted on the same labelled examples, their choices made on validation too."
    )
    rows.append("\nRecipes (a task's catalog entry may set fields over `finetune.*`):\n")
    rows.extend(f"- {line.task}: {line.recipe}" for line in tasks)
    rows.extend(f"\n**{warning}**" for line in tasks for warning in warnings(line))
    return "\n".join(rows)


def lift_row(line: TaskFigures) -> list[object]:
    """A task's cells in the lift table, in `markdown_table`'s column order."""
    pre, rand = line.pretrained, line.random_init
    return [
        line.task,
        line.metric,
        f"{pre.mean:.3f} ± {pre.std:.3f}",
        f"{rand.mean:.3f} ± {rand.std:.3f}",
        f"{line.lift:+.3f}",
        interval_text(line.ci),
        interval_text(line.bootstrap),
        baselines_text(line.baselines),
        f"{pre.learning_rate:g} / {rand.learning_rate:g}",
        f"{pre.epochs_mean:.1f} / {rand.epochs_mean:.1f}",
        f"{pre.capped_runs} / {rand.capped_runs}",
        line.seeds,
        line.train_examples,
    ]


def bar_chart(lines: list[TaskFigures], path: Path) -> None:
    """Pretrained against random init per task, error bars = std over seeds; each baseline is a
    black reference line across its task's bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(max(5.5, 1.6 * len(lines) + 2), 3.8))
    width = 0.38
    for offset, arm in enumerate(ARMS):
        positions = [index + (offset - 0.5) * width for index in range(len(lines))]
        axes.bar(
            positions,
            [line.arms[arm].mean for line in lines],
            width,
            yerr=[line.arms[arm].std for line in lines],
            capsize=4,
            label=ARM_NAMES[arm],
        )
    styles: list[Literal["--", ":", "-."]] = ["--", ":", "-."]
    names = list(dict.fromkeys(name for line in lines for name in line.baselines))
    for index, line in enumerate(lines):
        for name, value in line.baselines.items():
            first = all(name not in other.baselines for other in lines[:index])
            axes.hlines(
                value,
                index - 1.2 * width,
                index + 1.2 * width,
                colors="black",
                linestyles=styles[names.index(name) % len(styles)],
                label=f"baseline: {name}" if first else "_nolegend_",
            )
    axes.set_xticks(range(len(lines)))
    axes.set_xticklabels([f"{line.task}\n({line.metric})" for line in lines])
    axes.set_ylabel("test score (mean ± std over seeds)")
    axes.set_title("Pretrained vs random init")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
