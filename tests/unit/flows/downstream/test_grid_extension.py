"""`finetune.grid_extensions`: when validation chooses an end of the learning-rate grid, the grid
grows past that end a grid step at a time, so a verdict is not read from an arm tuned short of its
best rate (all-MiniLM-L6-v2 chose the top of [5e-5, 1e-4, 2e-4] on NCBI-disease, BC5CDR and QA).

Fine-tuning is a table here (validation score by rate): this is the rule and the choice, not the
training."""

from __future__ import annotations

import math
from functools import partial
from types import SimpleNamespace
from typing import Any, cast

import pytest

from flows.downstream.finetuning import recipe
from flows.downstream.finetuning.recipe import RunResult, TaskRun, rate_beyond
from flows.downstream.settings import Recipe

GRID = [5e-5, 1e-4, 2e-4]


def arm_peaking_at(
    monkeypatch: pytest.MonkeyPatch, best_rate: float, extensions: int
) -> tuple[recipe.ArmResult, list[float]]:
    """The arm's tuning when validation peaks at `best_rate`; and the rates trained, in order."""
    trained: list[float] = []

    def scored(run: TaskRun, arm: str, rate: float, seed: int, pruning: Any) -> RunResult:
        trained.append(rate)
        score = 0.8 - math.log(rate / best_rate) ** 2 / 100
        return RunResult(arm, rate, seed, score, 1, False, {}, [], None, [score], False)

    monkeypatch.setattr(recipe, "train_once", scored)
    settings = Recipe(seeds=2, learning_rates=GRID, grid_extensions=extensions)
    run = SimpleNamespace(settings=settings, spec=SimpleNamespace(name="t"), base_dir=None)
    run.grid = partial(TaskRun.grid, run)  # type: ignore[arg-type]
    return recipe.evaluate_arm(cast(TaskRun, run), "x", [0, 1]), trained


def test_a_grid_step_past_an_end_is_the_ratio_of_that_ends_two_rates() -> None:
    assert rate_beyond(GRID, 2e-4) == pytest.approx(4e-4)
    assert rate_beyond(GRID, 5e-5) == pytest.approx(2.5e-5)
    assert rate_beyond(GRID, 1e-4) is None  # inside: nothing to extend
    assert rate_beyond([1e-4], 1e-4) is None  # one rate has no step


def test_off_by_default_the_grid_is_as_configured_and_its_end_is_flagged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arm, trained = arm_peaking_at(monkeypatch, 4e-4, extensions=0)
    assert trained == [*GRID, 2e-4]  # the grid on the first seed, then the second seed
    assert arm.learning_rate == 2e-4 and arm.grid_edge == "highest"


def test_the_grid_grows_past_the_chosen_end_until_validation_turns_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arm, trained = arm_peaking_at(monkeypatch, 4e-4, extensions=3)
    assert trained == pytest.approx([*GRID, 4e-4, 8e-4, 4e-4])  # 8e-4 scored worse: it stops
    assert arm.learning_rate == pytest.approx(4e-4) and arm.grid_edge is None
    assert list(arm.grid) == ["5e-05", "0.0001", "0.0002", "0.0004", "0.0008"]


def test_the_extensions_are_a_budget_and_an_end_still_chosen_is_flagged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arm, trained = arm_peaking_at(monkeypatch, 1e-3, extensions=1)
    assert trained == pytest.approx([*GRID, 4e-4, 4e-4])
    assert arm.learning_rate == pytest.approx(4e-4) and arm.grid_edge == "highest"


def test_it_grows_downward_past_a_chosen_lowest_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    arm, trained = arm_peaking_at(monkeypatch, 2e-5, extensions=2)
    assert trained == pytest.approx([*GRID, 2.5e-5, 1.25e-5, 2.5e-5])
    assert arm.learning_rate == pytest.approx(2.5e-5) and arm.grid_edge is None
