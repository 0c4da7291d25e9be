"""SIGKILL while checkpoints are being written never leaves a run that cannot resume."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from flows.training.training_checkpoints import resumable_checkpoint

pytestmark = pytest.mark.slow
WRITER = """
import sys, torch
from pathlib import Path
from flows.training.training_checkpoints import AtomicCheckpointIO
last, writer = Path(sys.argv[1]), AtomicCheckpointIO()
step = 0
while True:
    step += 1
    weights = torch.full((8_000_000,), float(step))  # 32 MB: a save takes a while
    writer.save_checkpoint({"global_step": step, "weights": weights}, last)
    print(step, flush=True)
"""


@pytest.mark.parametrize("seed", range(5))
def test_a_kill_mid_save_leaves_a_loadable_checkpoint(tmp_path: Path, seed: int) -> None:
    last = tmp_path / "checkpoints" / "last.ckpt"
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(last)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    while int(process.stdout.readline() or 0) < 2:  # two saves done: last and previous exist
        assert process.poll() is None
    time.sleep(random.Random(seed).uniform(0.0, 1.0))  # a kill somewhere inside a later save
    process.send_signal(signal.SIGKILL)
    process.wait()
    chosen = resumable_checkpoint(last)
    assert chosen is not None
    state = torch.load(chosen, weights_only=True)
    assert torch.all(state["weights"] == float(state["global_step"]))
    assert not list(last.parent.glob(".*.partial"))
