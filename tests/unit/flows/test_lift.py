"""The two-step lift table: per-seed scores from both steps' results, lifts paired by seed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flows.lift import ADAPTATIONS, parse_args, render


def summary(
    directory: Path,
    pretrained: list[float],
    random: list[float],
    task: str = "ncbi_disease",
    metric: str = "entity_f1",
) -> dict[str, Any]:
    directory.mkdir()
    runs = {
        arm: {"runs": [{"seed": 7 - i, "test": {metric: s}} for i, s in enumerate(scores)]}
        for arm, scores in (("pretrained", pretrained), ("random_init", random))
    }
    (directory / "results.json").write_text(json.dumps({task: runs}))
    figures = {
        f"{task}.{name}": value
        for name, value in (
            ("metric", metric),
            ("seeds", 3),
            ("max_epochs", 10),
            (f"lift_{metric}", 0.3),
            (f"lift_{metric}_bootstrap_low", 0.2),
            (f"lift_{metric}_bootstrap_high", 0.4),
        )
    }
    for arm in ("pretrained", "random_init"):
        for name, value in (
            ("learning_rate", 1e-3),
            ("epochs_mean", 4.0),
            ("capped_runs", 0),
            (f"{metric}_mean", 0.5),
            (f"{metric}_std", 0.1),
        ):
            figures[f"{task}.{arm}_{name}"] = value
    return {
        "stages": {
            "pretrain": {"train_tokens": 3_276_800},
            "finetune": {
                "path": str(directory),
                "tasks": [task],
                "confidence": 0.95,
                **figures,
            },
        }
    }


def test_lifts_pair_by_seed_and_a_differing_random_arm_is_reported(tmp_path: Path) -> None:
    general = summary(tmp_path / "a", [0.5, 0.6, 0.7], [0.2, 0.3, 0.4])
    domain = summary(tmp_path / "b", [0.6, 0.7, 0.9], [0.2, 0.3, 0.4])
    table = render(general, domain).splitlines()
    assert table[2] == "| random init | 0 | 0.300 ± 0.100 |  | 0.001 | 4.0 |"
    assert table[3].startswith(
        "| general | 3.28 M Wikipedia | 0.600 ± 0.100 | +0.300 [+0.300, +0.300] |"
    )
    # domain - general per seed: +0.1, +0.1, +0.2 -> mean +0.133, t(2) interval
    assert "| +0.433 [+0.290, +0.577]; +0.133 [-0.010, +0.277] |" in table[4]
    assert len(table) == 5
    mismatch = summary(tmp_path / "c", [0.6, 0.7, 0.9], [0.2, 0.3, 0.5])
    assert "step 2's random-init arm scored" in render(general, mismatch)


def test_task_adaptive_pretraining_reads_its_own_task_and_names_its_text(tmp_path: Path) -> None:
    sst2 = ADAPTATIONS["sst2"]
    general = summary(tmp_path / "a", [0.6, 0.7, 0.8], [0.5, 0.6, 0.7], "sst2", "accuracy")
    adapted = summary(tmp_path / "b", [0.7, 0.8, 0.9], [0.5, 0.6, 0.7], "sst2", "accuracy")
    table = render(general, adapted, sst2).splitlines()
    assert "sst2 test accuracy" in table[0]
    assert table[3].startswith("| general | 3.28 M Wikipedia | 0.700 ± 0.100 | +0.100 ")
    assert table[4].startswith("| general + domain | + 3.28 M SST-2 train text | 0.800 ± 0.100 |")


def test_the_experiment_is_pubmed_unless_named() -> None:
    args = parse_args(["trainer.threads=2"])
    assert (ADAPTATIONS[args.experiment], args.overrides) == (
        ADAPTATIONS["pubmed"],
        ["trainer.threads=2"],
    )
    args = parse_args(["--experiment", "sst2", "finetune.seeds=3", "--via-transformers"])
    assert (args.experiment, args.overrides, args.via_transformers) == (
        "sst2",
        ["finetune.seeds=3"],
        True,
    )
