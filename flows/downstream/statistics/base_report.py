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
    from flows.downstream.training.recipe import ArmResult

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


def base_result(outputs: dict[str, Any], task: str, confidence: float) -> list[str]:
    """The summary's line for a continued checkpoint: adapted over base, with both intervals."""
    metric = outputs[f"{task}.metric"]
    if f"{task}.base_{metric}_mean" not in outputs:
        return []
    prefix = f"{task}.{OVER_BASE}_{metric}"

    def interval(low: str, high: str) -> str:
        if low not in outputs:
            return "none (one seed)"
        return f"[{outputs[low]:+.3f}, {outputs[high]:+.3f}]"

    return [
        f"  base checkpoint {outputs[f'{task}.base_{metric}_mean']:.3f} ± "
        f"{outputs[f'{task}.base_{metric}_std']:.3f} (lift over random init "
        f"{outputs[f'{task}.base_lift_{metric}']:+.3f}); adapted over base "
        f"{outputs[prefix]:+.3f}",
        f"    {confidence:.0%} CI over base: paired t over seeds "
        f"{interval(f'{prefix}_ci_low', f'{prefix}_ci_high')}, bootstrap over test examples "
        f"{interval(f'{prefix}_bootstrap_low', f'{prefix}_bootstrap_high')}",
    ]
