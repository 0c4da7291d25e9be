"""Two pipelines with the same config on one fresh artifact root, started together."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.fakes import run_twice_together

pytestmark = pytest.mark.slow


def test_both_finish_and_each_stage_is_computed_once(tmp_path: Path) -> None:
    env = {**os.environ, "CLOZE_HOME": str(tmp_path)}
    env.pop("PREFECT_HOME", None)  # both share the root's own local Prefect and MLflow stores
    run_twice_together([sys.executable, "-m", "flows", "experiment=smoke"], env, timeout=600)
    assert not list(tmp_path.glob("artifacts/*/.corrupt-*"))
