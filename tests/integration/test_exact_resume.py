"""Kill pretraining mid-run, rerun, and get the same weights as a run that was never killed: from
random init, and continuing an imported transformers checkpoint."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lightning_modules.models.config import WEIGHTS_FILE
from tests.fakes import write_corpus
from tests.integration import pretrain_worker

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("model", [*sorted(pretrain_worker.MODELS), pretrain_worker.CHECKPOINT])
def test_resumed_pretraining_ends_with_the_weights_of_an_uninterrupted_run(
    tmp_path: Path, model: str
) -> None:
    corpus = write_corpus(tmp_path / "corpus.txt")

    def worker(store: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tests.integration.pretrain_worker",
            store,
            str(corpus),
            model,
        ]

    # Both runs in fresh processes: what earlier tests left in this one (threads, seeds, flags)
    # must not make the uninterrupted run differ from the resumed one.
    subprocess.run(worker(str(tmp_path / "a")), check=True, timeout=300)
    reference = pretrain_worker.run(tmp_path / "a", corpus, model)  # a cache hit: the manifest
    assert not reference.outputs["resumed"]
    # Same tokenizer and shards in a second store: only pretraining is redone there.
    for stage in ("tokenizer", "shards", "checkpoint"):
        if not (tmp_path / "a" / stage).is_dir():
            continue
        # symlinks=True: the tokenizer's input key is a link to its content folder.
        shutil.copytree(tmp_path / "a" / stage, tmp_path / "b" / stage, symlinks=True)

    command = worker(str(tmp_path / "b"))
    process = subprocess.Popen(command, start_new_session=True)
    checkpoint = (
        tmp_path / "b" / "pretrain" / f".work-{reference.key}" / "checkpoints" / "last.ckpt"
    )
    deadline = time.monotonic() + 180
    while not checkpoint.is_file():
        assert process.poll() is None and time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.05)
    # A few steps past the checkpoint, so the kill loses real progress; not more: an idle machine
    # trains the remaining 75 steps of this tiny model in under half a second.
    time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "b" / "pretrain" / reference.key).exists()

    subprocess.run(command, check=True, timeout=300)
    resumed = pretrain_worker.run(tmp_path / "b", corpus, model)  # a cache hit: reads the manifest
    assert resumed.outputs["resumed"] is True
    assert resumed.outputs["steps"] == reference.outputs["steps"] == 90
    expected = load_file(str(reference.path / WEIGHTS_FILE))
    actual = load_file(str(resumed.path / WEIGHTS_FILE))
    for name, tensor in expected.items():
        assert torch.allclose(actual[name], tensor, atol=1e-6), name
    assert resumed.outputs["val_loss"] == pytest.approx(reference.outputs["val_loss"], abs=1e-6)
