"""The distilled student's share of the teacher's lift: Fieller's interval over paired seeds,
bounded only when the teacher's own lift is told from zero."""

from __future__ import annotations

import pytest

from flows.downstream.finetuning.recipe import ArmResult, RunResult
from flows.downstream.statistics.distill_report import share_text, student_outputs
from flows.downstream.statistics.report import paired_interval, ratio_interval
from flows.downstream.tasks.spec import STUDENT_ARM

TEACHER_LIFTS = [0.10, 0.14, 0.12, 0.15, 0.11]
STUDENT_LIFTS = [0.06, 0.09, 0.05, 0.10, 0.08]


def test_the_bounds_are_the_ratios_whose_paired_t_interval_just_reaches_zero() -> None:
    low, high = ratio_interval(STUDENT_LIFTS, TEACHER_LIFTS, 0.95) or (0.0, 0.0)
    point = sum(STUDENT_LIFTS) / sum(TEACHER_LIFTS)
    assert low < point < high
    for bound, touching_end in ((low, 0), (high, 1)):
        residuals = [a - bound * b for a, b in zip(STUDENT_LIFTS, TEACHER_LIFTS, strict=True)]
        interval = paired_interval(residuals, 0.95)
        assert interval is not None
        assert interval[touching_end] == pytest.approx(0.0, abs=1e-12)


def test_a_student_that_keeps_exactly_half_of_every_seed_has_an_interval_of_one_point() -> None:
    halves = [lift / 2 for lift in TEACHER_LIFTS]
    assert ratio_interval(halves, TEACHER_LIFTS, 0.95) == pytest.approx((0.5, 0.5), abs=1e-6)


def test_no_interval_when_the_teacher_lift_may_be_nothing_or_there_is_one_seed() -> None:
    noisy_teacher = [0.05, -0.04, 0.03, -0.02, 0.01]
    assert paired_interval(noisy_teacher, 0.95)[0] < 0  # type: ignore[index]
    assert ratio_interval(STUDENT_LIFTS, noisy_teacher, 0.95) is None
    assert ratio_interval([0.05], [0.1], 0.95) is None


def arm(scores: list[float]) -> ArmResult:
    runs = [
        RunResult("arm", 1e-3, seed, 0.5, 3, False, {"accuracy": score}, [])
        for seed, score in enumerate(scores)
    ]
    return ArmResult(1e-3, {"0.001": 0.5}, runs)


def stage_outputs(teacher_lifts: list[float], student_lifts: list[float]) -> dict[str, object]:
    """The flat figures a finetune stage with a student writes for task `t`."""
    floor = [0.5 + seed / 100 for seed in range(len(teacher_lifts))]
    arms = {
        "random_init": arm(floor),
        "pretrained": arm([f + lift for f, lift in zip(floor, teacher_lifts, strict=True)]),
        STUDENT_ARM: arm([f + lift for f, lift in zip(floor, student_lifts, strict=True)]),
    }
    lift_interval = paired_interval(teacher_lifts, 0.95)
    outputs: dict[str, object] = {"t.metric": "accuracy"}
    if lift_interval is not None:
        outputs["t.lift_accuracy_ci_low"], outputs["t.lift_accuracy_ci_high"] = lift_interval
    return outputs | student_outputs("t", arms, 0.95)


def test_the_stage_records_the_share_and_its_interval_and_the_report_prints_both() -> None:
    outputs = stage_outputs(TEACHER_LIFTS, STUDENT_LIFTS)
    low, high = ratio_interval(STUDENT_LIFTS, TEACHER_LIFTS, 0.95) or (0.0, 0.0)
    assert outputs["t.student_share_of_lift_accuracy"] == pytest.approx(38 / 62)
    assert outputs["t.student_share_of_lift_accuracy_ci_low"] == pytest.approx(low)
    assert outputs["t.student_share_of_lift_accuracy_ci_high"] == pytest.approx(high)
    assert share_text(outputs, "t", "accuracy", 0.95) == (
        f"61% [{low:.0%}, {high:.0%}, 95% Fieller]"
    )


def test_the_report_says_why_a_share_has_no_interval() -> None:
    noisy = stage_outputs([0.05, -0.04, 0.03, -0.02, 0.02], STUDENT_LIFTS)
    assert "t.student_share_of_lift_accuracy_ci_low" not in noisy
    assert share_text(noisy, "t", "accuracy", 0.95).endswith(
        "(no interval: the teacher's lift is not told from zero)"
    )
    one_seed = stage_outputs([0.1], [0.05])
    assert share_text(one_seed, "t", "accuracy", 0.95) == "50% (one seed: no interval)"
    no_lift = stage_outputs([0.0, 0.0], [0.05, 0.04])
    assert share_text(no_lift, "t", "accuracy", 0.95) == "n/a (no teacher lift)"
