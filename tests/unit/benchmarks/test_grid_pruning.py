"""The grid-pruning replay reads a run's per-epoch validation scores from a real MLflow store and
says what the rule would have dropped, chosen and saved."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from benchmarks.grid_pruning import main

# A pretrained arm's grid on seed 1 (3e-4 collapses, then recovers too late), its other seed.
CURVES = {
    "pretrained-lr0.0001-seed1-val/score": [0.5, 0.7, 0.72],
    "pretrained-lr0.0003-seed1-val/score": [0.2, 0.1, 0.9],
    "pretrained-lr0.0003-seed2-val/score": [0.3, 0.6, 0.8],
}


def test_the_replay_reports_the_dropped_rate_the_changed_choice_and_the_epochs_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("cloze"), run_name="ncbi_disease")
    for timestamp, (key, scores) in enumerate(CURVES.items()):
        for epoch, score in enumerate(scores, start=1):
            client.log_metric(run.info.run_id, key, score, timestamp=timestamp, step=epoch)
    main(["--tracking-uri", uri, "--margins", "0.05,0.9"])
    out = capsys.readouterr().out
    assert "margin 0.05: the same rate chosen in 0 of 1 grids; 1 of 9 fine-tuning epochs" in out
    assert "| ncbi_disease pretrained seed 1 | 0.0003 | 0.0001 | 6 | 5 | 0.0003@2 |" in out
    assert "margin 0.9: the same rate chosen in 1 of 1 grids; 0 of 9" in out
