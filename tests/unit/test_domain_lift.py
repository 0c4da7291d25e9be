"""The domain-lift table: per-seed scores from both steps' results, lifts paired by seed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flows.domain_lift import render


def summary(directory: Path, pretrained: list[float], random: list[float]) -> dict[str, Any]:
    directory.mkdir()
    runs = {
        arm: {"runs": [{"seed": 7 - i, "test": {"entity_f1": s}} for i, s in enumerate(scores)]}
        for arm, scores in (("pretrained", pretrained), ("random_init", random))
    }
    (directory / "results.json").write_text(json.dumps({"ncbi_disease": runs}))
    figures = {
        f"ncbi_disease.{name}": value
        for name, value in (
            ("metric", "entity_f1"),
            ("seeds", 3),
            ("max_epochs", 10),
            ("lift_entity_f1", 0.3),
            ("lift_entity_f1_bootstrap_low", 0.2),
            ("lift_entity_f1_bootstrap_high", 0.4),
        )
    }
    for arm in ("pretrained", "random_init"):
        for name, value in (
            ("learning_rate", 1e-3),
            ("epochs_mean", 4.0),
            ("capped_runs", 0),
            ("entity_f1_mean", 0.5),
            ("entity_f1_std", 0.1),
        ):
            figures[f"ncbi_disease.{arm}_{name}"] = value
    return {
        "stages": {
            "pretrain": {"train_tokens": 3_276_800},
            "finetune": {
                "path": str(directory),
                "tasks": ["ncbi_disease"],
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
