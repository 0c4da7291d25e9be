"""A grid rate clearly behind its seed's leader is dropped after two epochs, never chosen, and a
dropped run's epochs are exactly the first epochs of its full run (so a full grid's per-epoch
scores tell what the rule would have changed)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from flows.downstream.evaluate import prepare_task
from flows.downstream.finetuning import recipe
from flows.downstream.finetuning.pruning import AFTER_EPOCHS, GridPruning, would_prune
from flows.downstream.finetuning.recipe import RunResult, TaskRun
from flows.downstream.settings import Recipe
from flows.stages.finetune import stage_sources
from tests.fakes import TINY_TRAINER, WordShards, word_finetune

LEADER = GridPruning(leader=(0.50, 0.70, 0.65), margin=0.05)


@pytest.mark.parametrize(
    ("epoch", "best", "behind"),
    [
        (1, 0.0, False),  # every run gets AFTER_EPOCHS epochs first
        (2, 0.66, False),  # within the margin of the leader's 0.70 at epoch 2
        (2, 0.64, True),
        (3, 0.64, True),  # the leader's best by epoch 3 is still 0.70, not its 0.65
        (5, 0.66, False),  # past the leader's last epoch: its final best is the bar
    ],
)
def test_a_run_is_behind_when_its_best_trails_the_leaders_best_by_then_by_the_margin(
    epoch: int, best: float, behind: bool
) -> None:
    assert LEADER.behind(epoch, best) is behind


def test_would_prune_names_the_epoch_the_rule_stops_a_full_run_at() -> None:
    assert would_prune([0.1, 0.2, 0.9], LEADER) == AFTER_EPOCHS
    assert would_prune([0.1, 0.68, 0.2], LEADER) is None


# Validation scores per epoch of each rate on seed 0: 1e-4 leads, 1e-2 collapses, 1e-3 keeps up.
CURVES = {1e-4: [0.5, 0.7, 0.72], 1e-2: [0.2, 0.1, 0.9], 1e-3: [0.4, 0.68, 0.71]}


@pytest.mark.parametrize(("margin", "trained_epochs"), [(None, 9), (0.05, 8)])
def test_the_grid_drops_a_trailing_rate_and_never_chooses_it(
    monkeypatch: pytest.MonkeyPatch, margin: float | None, trained_epochs: int
) -> None:
    """Fine-tuning is the table above: this is the rule and the choice, not the training. At
    margin 0.05, 1e-2 stops at epoch 2 (0.2 < 0.7 - 0.05) and its late 0.9 is never seen."""
    epochs: list[int] = []

    def scored(run: TaskRun, arm: str, rate: float, seed: int, pruning: Any) -> RunResult:
        curve = CURVES[rate]
        stop = None if pruning is None else would_prune(curve, pruning)
        seen = curve[:stop] if stop else curve
        epochs.append(len(seen))
        best = max(seen)
        return RunResult(
            arm, rate, seed, best, seen.index(best) + 1, False, {}, [], None, seen, bool(stop)
        )

    monkeypatch.setattr(recipe, "train_once", scored)
    settings = Recipe(seeds=1, learning_rates=list(CURVES), grid_pruning_margin=margin)
    run = SimpleNamespace(settings=settings, spec=SimpleNamespace(name="t"), base_dir=None)
    run.grid = partial(TaskRun.grid, run)
    arm = recipe.evaluate_arm(cast(TaskRun, run), "x", [0])
    assert sum(epochs) == trained_epochs
    assert arm.learning_rate == (1e-2 if margin is None else 1e-4)


def test_a_real_pruned_run_is_the_start_of_its_full_run(
    word_shards: WordShards, word_encoder: Any, tmp_path: Path
) -> None:
    settings = word_finetune(word_shards, epochs=4, patience=4)
    sources = stage_sources(
        settings,
        5,
        TINY_TRAINER,
        word_shards.tokenizer,
        word_encoder.path,
        tmp_path,
        lambda task, label: (),
    )
    _, run, _ = prepare_task(settings.plan[0], sources)
    unreachable = GridPruning(leader=(2.0,), margin=0.5)  # a bar of 1.5: no score reaches it
    pruned = recipe.train_once(run, "pretrained", 1e-2, 5, unreachable)
    full = recipe.train_once(run, "pretrained", 1e-2, 5)
    assert pruned.pruned and len(pruned.validation_scores) == AFTER_EPOCHS
    assert not full.pruned and len(full.validation_scores) == 4
    assert full.validation_scores[:AFTER_EPOCHS] == pruned.validation_scores
