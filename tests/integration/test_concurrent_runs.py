"""Two pipelines with the same config on one fresh artifact root, started together."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
STAGES = ("tokenizer", "shards", "pretrain", "finetune")


def test_both_finish_and_each_stage_is_computed_once(tmp_path: Path) -> None:
    env = {**os.environ, "CLOZE_HOME": str(tmp_path)}
    env.pop("PREFECT_HOME", None)  # both share the root's own local Prefect and MLflow stores
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "flows", "experiment=smoke"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output[-3000:]
    for stage in STAGES:
        computed = sum(
            bool(re.search(rf"^\s+{stage}\s+\[computed\]", output, re.MULTILINE))
            for output in outputs
        )
        assert computed == 1, f"{stage} computed {computed} times"
    assert not list(tmp_path.glob("artifacts/*/.corrupt-*"))
