"""What the runs of a task leave: each run's scores, each arm's chosen rate and runs, each
baseline's fits. Plain records, apart from the code that makes them, so the reports
(flows/downstream/statistics/) and the task kinds read them without importing training.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self


@dataclass(frozen=True)
class RunResult:
    arm: str
    learning_rate: float
    seed: int
    validation_score: float
    best_epoch: int
    capped: bool  # the best epoch was the last allowed: more epochs might have helped
    test: dict[str, float]
    test_predictions: list[Any] = field(repr=False)  # for the test-set bootstrap
    # Question answering with unanswerable questions: the null-score margin above which the run
    # answered nothing, fitted on validation (qa_decoding.fit_threshold); None for other runs.
    null_threshold: float | None = None
    validation_scores: list[float] = field(default_factory=list)  # after each epoch
    pruned: bool = False  # a grid run stopped for trailing its seed's leader (pruning.py)
    # Question answering: the best epoch's validation span F1 (what breaks a tie of the metric),
    # and each test question's best span, abstention off (the span skill's bootstrap input).
    validation_span_f1: float | None = None
    test_spans: list[str] | None = field(default=None, repr=False)
    # Multi-label: each label's threshold, in label order, chosen on validation (multi_label.py).
    label_thresholds: list[float] | None = None


@dataclass
class ArmResult:
    learning_rate: float
    grid: dict[str, float]  # learning rate -> mean validation score over `grid_seeds` seeds
    runs: list[RunResult] = field(default_factory=list)
    # "lowest" or "highest" when the chosen rate is an end of a grid of two or more rates: the best
    # rate may lie outside the grid; "tied" when every rate scored the same on validation (the
    # rate was chosen on the tiebreak, or is the first). None inside the grid, or for a one-rate
    # grid (no choice).
    grid_edge: str | None = None

    @classmethod
    def from_record(cls, record: Mapping[str, Any], predictions: list[Any] | None = None) -> Self:
        """An arm read back from its JSON (`asdict`); `predictions`, one list per run, when the
        record was stored without them (results.json keeps them in predictions.json)."""
        runs = record["runs"]
        if predictions is not None:
            runs = [
                {**run, "test_predictions": predicted}
                for run, predicted in zip(runs, predictions, strict=True)
            ]
        return cls(
            record["learning_rate"],
            record["grid"],
            [RunResult(**run) for run in runs],
            record["grid_edge"],
        )


@dataclass
class BaselineResult:
    """One baseline over every fit (one per distinct train sample): test scores and choices."""

    name: str
    test: list[dict[str, float]] = field(default_factory=list)
    choices: list[dict[str, float]] = field(default_factory=list)  # e.g. {"C": 1.0}
