"""`python -m flows.ui` before it starts anything: the banner's link and the ports it refuses."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from flows.core.settings import ConfigError
from flows.tracking.runs import Tracker
from flows.ui import UiSettings, check_port, experiment_link, main


def test_the_banner_links_the_experiments_runs_table_in_the_model_training_view(
    tmp_path: Path,
) -> None:
    settings = UiSettings(tmp_path, "cloze", 4200, 5000)
    # Before any run: the experiments list, in the same view.
    assert experiment_link(settings) == (
        "http://127.0.0.1:5000/#/experiments?workflowType=machine_learning"
    )
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "cloze", tmp_path / "mlartifacts")
    assert experiment_link(settings) == (
        f"http://127.0.0.1:5000/#/experiments/{tracker.experiment_id}/runs"
        "?workflowType=machine_learning"
    )


def test_a_taken_port_is_named_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"--mlflow-port={port}: 127.0.0.1:{port} is taken"):
            check_port("--mlflow-port", port)
        assert main(["--mlflow-port", str(port)]) == 2
    assert capsys.readouterr().err.startswith(f"error: --mlflow-port={port}: ")
