"""How the time-to-quality benchmark reads its curves: the clock leaves scoring out, a loss at a
time is the last one scored by then, and the time to a target is interpolated between scores."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks.time_to_quality import TrainingClock, loss_at, main, summary, time_to_reach

CURVE = [
    {"seconds": 0.0, "step": 0, "tokens": 0, "loss": 9.0},
    {"seconds": 60.0, "step": 10, "tokens": 100, "loss": 7.0},
    {"seconds": 120.0, "step": 20, "tokens": 200, "loss": 5.0},
]


def test_the_training_clock_stops_while_the_model_is_scored() -> None:
    def slow_score() -> float:
        time.sleep(0.2)
        return 1.0

    clock = TrainingClock(budget_s=10.0, every_s=5.0, score=slow_score)
    clock.tick(step=1, tokens=8)  # mark 0: scored (0.2 s of scoring, off the clock)
    assert clock.elapsed() < 0.1
    assert [point["step"] for point in clock.curve] == [1]
    clock.tick(step=2, tokens=16)  # before the next mark: not scored
    assert len(clock.curve) == 1


def test_the_clock_says_when_the_budget_is_spent() -> None:
    clock = TrainingClock(budget_s=0.0, every_s=60.0, score=lambda: 2.0)
    assert clock.tick(step=5, tokens=40)
    assert clock.curve[-1]["loss"] == 2.0


def test_a_loss_at_a_time_is_the_last_scored_by_then() -> None:
    assert loss_at(CURVE, 59.0) == 9.0
    assert loss_at(CURVE, 60.0) == 7.0
    assert loss_at(CURVE, 1200.0) == 5.0  # a run that ended keeps its last loss
    assert loss_at(CURVE[1:], 30.0) == 7.0  # a first step longer than the budget: its score


def test_the_time_to_a_loss_is_interpolated_between_scores() -> None:
    assert time_to_reach(CURVE, 6.0) == 90.0
    assert time_to_reach(CURVE, 7.0) == 60.0
    assert time_to_reach(CURVE, 4.0) is None


def test_the_summary_times_cloze_to_the_peers_final_loss() -> None:
    peer = {"path": "run_mlm.py defaults", "curve": CURVE, "peak_rss_mb": 1.0}
    faster = [{**point, "seconds": point["seconds"] / 4} for point in CURVE]
    cloze = {"path": "cloze", "curve": faster, "peak_rss_mb": 1.0, "flops_per_token": 1e9}
    rows = summary([peer, cloze], budget_s=120.0, peak_gflops=10.0)
    assert "minutes to the peer's final loss" not in rows[0]
    assert rows[1]["minutes to the peer's final loss"] == 0.5  # 30 s: 4x sooner
    assert rows[0]["mfu"] == pytest.approx(1 / 6)  # 200 tokens in 120 s x 1 GFLOP / 10 GFLOP/s
    assert rows[1]["mfu"] == pytest.approx(2 / 3)


@pytest.mark.slow
def test_the_benchmark_runs_both_paths_end_to_end_on_a_tiny_shape(tmp_path: Path) -> None:
    """The published figure can be re-run: both paths train for seconds on smoke's bert-tiny
    and are scored (it once died in run_mlm_defaults when the plan's model became typed)."""
    overrides = ["experiment=smoke", "corpus.max_documents=400", "trainer.precision=32-true"]
    rows = main(
        [
            "--budget-minutes=0.05",
            "--score-every-s=1",
            "--threads=1",
            f"--overrides={','.join(overrides)}",
            f"--work-dir={tmp_path}",
        ]
    )
    assert [row["path"] for row in rows] == ["run_mlm.py defaults", "cloze"]
    assert all(row["steps"] >= 1 and row["tokens/s"] > 0 for row in rows), rows
    assert "minutes to the peer's final loss" in rows[1]
