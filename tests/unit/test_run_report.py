"""The flags a reader must not miss, in the summary and in summary.md: an arm capped by its
epochs, an arm whose chosen learning rate is an end of its grid, and every cap that bit."""

from __future__ import annotations

from typing import Any

from flows.downstream.recipe import ArmResult, RunResult, grid_edge
from flows.downstream.report import markdown_table, task_outputs
from flows.summary import downstream_result


def arm(rate: float, grid: list[float], best_epochs: list[int]) -> ArmResult:
    runs = [
        RunResult("arm", rate, seed, 0.5, epoch, epoch == 10, {"accuracy": 0.6 + seed / 100}, [])
        for seed, epoch in enumerate(best_epochs)
    ]
    return ArmResult(rate, {f"{r:g}": 0.5 for r in grid}, runs, grid_edge(rate, grid))


def outputs(arms: dict[str, ArmResult], **extra: Any) -> dict[str, Any]:
    figures = task_outputs("t", "accuracy", arms, 0.95, 10)
    return {
        "confidence": 0.95,
        **figures,
        "t.lift_accuracy_bootstrap_low": -0.1,
        "t.lift_accuracy_bootstrap_high": 0.1,
        "t.baselines": "",
        "t.train_examples": 100,
        "t.recipe": "2 seeds, ...",
        "t.recipe_set_by_task": "",
        **extra,
    }


def test_the_grid_edge_is_an_end_of_a_grid_of_two_or_more_rates() -> None:
    grid = [1e-4, 3e-4, 1e-3]
    assert [grid_edge(rate, grid) for rate in grid] == ["lowest", None, "highest"]
    assert grid_edge(1e-3, [1e-3]) is None  # one rate: nothing was chosen


def test_an_arm_at_the_grid_edge_is_flagged_with_the_key_to_extend() -> None:
    grid = [1e-4, 3e-4, 1e-3]
    arms = {"pretrained": arm(1e-3, grid, [3, 4]), "random_init": arm(3e-4, grid, [3, 4])}
    figures = outputs(arms)
    assert figures["t.pretrained_grid_edge"] == "highest"
    assert figures["t.random_init_grid_edge"] == ""
    warning = (
        "GRID EDGE t: pretrained chose 0.001, the highest rate of finetune.learning_rates; the "
        "best rate may lie outside the grid: extend finetune.learning_rates past that end"
    )
    assert f"  {warning}" in downstream_result(figures, "t")
    assert f"**{warning}**" in markdown_table(figures, ["t"], 0.95)
    inside = outputs({name: arm(3e-4, grid, [3, 4]) for name in arms})
    assert not any("GRID EDGE" in line for line in downstream_result(inside, "t"))


def test_a_flag_names_the_task_s_own_key_when_its_entry_sets_the_field() -> None:
    grid = [1e-4, 1e-3]
    arms = {name: arm(1e-4, grid, [10, 2]) for name in ("pretrained", "random_init")}
    lines = downstream_result(outputs(arms, **{"t.recipe_set_by_task": "epochs"}), "t")
    assert any("raise finetune.catalog.t.recipe.epochs" in line for line in lines)
    assert any("the lowest rate of finetune.learning_rates" in line for line in lines)
