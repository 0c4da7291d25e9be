"""What continuing a checkpoint bought: the adapted encoder beside the checkpoint it started from.

Domain-adaptive pretraining (BioBERT, "Don't Stop Pretraining") is judged against the checkpoint
before adaptation, not against random init: random init shows what pretraining at all is worth,
the `base` arm what this run's continued pretraining added. Both differences are paired by seed
(the seed fixes the head init, data order and labelled sample of every arm); the adapted minus
base difference gets a t-interval over seeds here and a bootstrap over test examples in the stage.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from flows.downstream.statistics.report import paired_figures, std
from flows.downstream.tasks.spec import BASE_ARM

if TYPE_CHECKING:
    from flows.downstream.finetuning.results import ArmResult

OVER_BASE = "over_base"  # `<task>.over_base_<metric>`: adapted minus base


def base_outputs(task: str, arms: dict[str, ArmResult], confidence: float) -> dict[str, Any]:
    """`<task>.base_*` (the base arm's scores and its own lift over random init) and
    `<task>.over_base_*` (adapted minus base, with its paired t-interval)."""
    base = arms[BASE_ARM]
    outputs: dict[str, Any] = {
        f"{task}.base_learning_rate": base.learning_rate,
        f"{task}.base_epochs_mean": statistics.fmean(r.best_epoch for r in base.runs),
        f"{task}.base_capped_runs": sum(r.capped for r in base.runs),
        f"{task}.base_grid_edge": base.grid_edge or "",
    }
    for name in base.runs[0].test:
        scores = {arm: [run.test[name] for run in result.runs] for arm, result in arms.items()}
        outputs[f"{task}.base_{name}_mean"] = statistics.fmean(scores[BASE_ARM])
        outputs[f"{task}.base_{name}_std"] = std(scores[BASE_ARM])
        outputs[f"{task}.base_lift_{name}"] = statistics.fmean(
            b - r for b, r in zip(scores[BASE_ARM], scores["random_init"], strict=True)
        )
        gains = [a - b for a, b in zip(scores["pretrained"], scores[BASE_ARM], strict=True)]
        outputs |= paired_figures(gains, confidence, f"{task}.{OVER_BASE}_{name}")
    return outputs


def base_verdict(outputs: dict[str, Any], task: str, confidence: float) -> list[str]:
    """A continued checkpoint's first summary lines: adapted over base with both intervals, then
    in words whether continuing helped, hurt or was not told apart; none without a base arm."""
    metric = outputs[f"{task}.metric"]
    if f"{task}.base_{metric}_mean" not in outputs:
        return []
    prefix = f"{task}.{OVER_BASE}_{metric}"

    def interval(low: str, high: str) -> str:
        if low not in outputs:
            return "none (one seed)"
        return f"[{outputs[low]:+.3f}, {outputs[high]:+.3f}]"

    lines = [
        f"{task} {metric} over {outputs[f'{task}.seeds']} seed(s): adapted over base "
        f"{outputs[prefix]:+.3f}; {confidence:.0%} CI paired t over seeds "
        f"{interval(f'{prefix}_ci_low', f'{prefix}_ci_high')}, bootstrap over test examples "
        f"{interval(f'{prefix}_bootstrap_low', f'{prefix}_bootstrap_high')}",
        f"  {verdict_words(outputs, prefix)}{provisional_words(outputs, task)}; base checkpoint "
        f"{outputs[f'{task}.base_{metric}_mean']:.3f} ± {outputs[f'{task}.base_{metric}_std']:.3f}"
        f" (its lift over random init {outputs[f'{task}.base_lift_{metric}']:+.3f})",
    ]
    capped = outputs.get(f"{task}.base_capped_runs", 0)
    if capped:
        lines.append(
            f"  CAPPED {task}: the base arm's best validation epoch was the last allowed in "
            f"{capped} of {outputs[f'{task}.seeds']} runs: raise finetune.pretrained_epochs"
        )
    return lines


def provisional_words(outputs: dict[str, Any], task: str) -> str:
    """` (provisional: best epoch at the epoch limit for the adapted arm in 2 of 3 runs)`: an
    arm whose best epoch was its last may still have been improving, so a verdict read from it
    is not final; empty when neither compared arm was capped."""
    seeds = outputs[f"{task}.seeds"]
    capped = [
        f"the {name} arm in {count} of {seeds} runs"
        for name, count in (
            ("adapted", outputs.get(f"{task}.pretrained_capped_runs", 0)),
            ("base", outputs.get(f"{task}.base_capped_runs", 0)),
        )
        if count
    ]
    if not capped:
        return ""
    return f" (provisional: best epoch at the epoch limit for {' and '.join(capped)})"


def verdict_words(outputs: dict[str, Any], prefix: str) -> str:
    """Both intervals below zero: worse; both above: better; else not told apart."""
    highs = [outputs.get(f"{prefix}_{kind}_high") for kind in ("ci", "bootstrap")]
    lows = [outputs.get(f"{prefix}_{kind}_low") for kind in ("ci", "bootstrap")]
    if any(high is not None and high < 0 for high in highs):
        return "WORSE: continuing made the model worse than the checkpoint"
    if any(low is not None and low > 0 for low in lows):
        return "continuing improved on the checkpoint"
    return "continuing is not told apart from the checkpoint"


def is_worse_than_base(outputs: dict[str, Any], task: str) -> bool:
    """Whether an interval of adapted over base lies wholly below zero for `task`."""
    metric = outputs.get(f"{task}.metric")
    prefix = f"{task}.{OVER_BASE}_{metric}"
    return verdict_words(outputs, prefix).startswith("WORSE")
