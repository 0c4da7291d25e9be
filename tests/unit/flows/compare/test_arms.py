"""Arms of two runs pair by seed, like the arms of one run, and only when they were scored alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.compare.arms import main
from flows.core.settings import ConfigError
from flows.downstream.statistics.pairing import ArmScores, paired_difference, read_arm
from tests.fakes import write_results

SEEDS = (1234, 1235, 1236)


def by_seed(seeds: tuple[int, ...], scores: tuple[float, ...]) -> dict[int, float]:
    return dict(zip(seeds, scores, strict=True))


def arm_of(directory: Path, arm: str = "student") -> ArmScores:
    return read_arm(directory / "results.json", "t", arm)


def test_the_difference_is_taken_seed_by_seed_whatever_order_the_runs_were_stored_in(
    tmp_path: Path,
) -> None:
    distilled = write_results(tmp_path / "a", {"student": by_seed(SEEDS, (0.70, 0.72, 0.74))})
    scratch = write_results(
        tmp_path / "b", {"pretrained": by_seed(SEEDS[::-1], (0.71, 0.70, 0.69))}
    )
    difference = paired_difference(arm_of(distilled), arm_of(scratch, "pretrained"), 0.95)
    # per seed: 0.70-0.69, 0.72-0.70, 0.74-0.71 = +0.01, +0.02, +0.03
    assert difference.differences == pytest.approx([0.01, 0.02, 0.03])
    assert difference.text == "+0.020 [-0.005, +0.045]"


def test_the_cli_prints_both_arms_and_the_paired_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    distilled = write_results(tmp_path / "a", {"student": by_seed(SEEDS, (0.70, 0.72, 0.74))})
    scratch = write_results(tmp_path / "b", {"pretrained": by_seed(SEEDS, (0.69, 0.70, 0.71))})
    assert main(["--task", "t", f"{distilled}:student", f"{scratch}:pretrained"]) == 0
    out = capsys.readouterr().out
    assert f"| {distilled}:student | 0.720 ± 0.020 | 3 |" in out
    assert "first - second, paired by seed [95% CI, t]: +0.020 [-0.005, +0.045]" in out


def test_one_seed_gives_a_difference_without_an_interval_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = write_results(tmp_path / "a", {"student": {7: 0.6}, "pretrained": {7: 0.5}})
    assert paired_difference(arm_of(one), arm_of(one, "pretrained"), 0.95).text == "+0.100"
    assert main(["--task", "t", f"{one}:student", f"{one}:pretrained"]) == 0
    out = capsys.readouterr().out
    assert "first - second, paired by seed: +0.100 (no interval with one seed)" in out
    assert "CI" not in out


def test_the_task_s_own_metric_is_compared_not_the_first_one_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scores = by_seed(SEEDS, (0.70, 0.72, 0.74))
    ner = write_results(tmp_path / "a", {"pretrained": scores}, metric="entity_f1")
    assert arm_of(ner, "pretrained").metric == "entity_f1"  # though `precision` came first
    assert main(["--task", "t", f"{ner}:pretrained", f"{ner}:pretrained"]) == 0
    assert "| t test entity_f1 (mean ± std) |" in capsys.readouterr().out
    (ner / "manifest.json").unlink()
    with pytest.raises(ConfigError, match=r"no manifest\.json says task 't''s metric; name one"):
        arm_of(ner, "pretrained")
    assert arm_of_metric(ner, "entity_f1").metric == "entity_f1"


def arm_of_metric(directory: Path, metric: str) -> ArmScores:
    return read_arm(directory / "results.json", "t", "pretrained", metric)


@pytest.mark.parametrize(
    ("second_seeds", "sampling", "message"),
    [
        ((1, 2, 3), {}, "arms pair by seed"),
        (SEEDS, {"train_examples": 1000}, "finetune.train_examples is 500 for"),
        (SEEDS, {"test_examples": 200}, "finetune.test_examples is None for"),
        (SEEDS, {"train_pool": 60000}, "the train pool a seed's sample is drawn from is 6000 for"),
    ],
    ids=["other seeds", "other labelled samples", "another test subset", "another train pool"],
)
def test_arms_that_were_not_scored_alike_are_refused(
    tmp_path: Path, second_seeds: tuple[int, ...], sampling: dict[str, int], message: str
) -> None:
    first = write_results(tmp_path / "a", {"student": dict.fromkeys(SEEDS, 0.7)})
    second = write_results(
        tmp_path / "b", {"pretrained": dict.fromkeys(second_seeds, 0.6)}, **sampling
    )
    with pytest.raises(ConfigError, match=message):
        paired_difference(arm_of(first), arm_of(second, "pretrained"), 0.95)
