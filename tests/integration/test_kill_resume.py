"""SIGKILL every stage at a seeded random point, rerun, and end exactly where an unkilled run ends.

The tokenizer is not bit-reproducible (see flows/stages/tokenizer.py), so the published tokenizer
artifact is the unit of reproducibility: the reference root is killed inside the tokenizer and
rerun to completion (shards, pretrain and finetune computed without interruption), then the kill
root starts from that tokenizer and is killed inside shards, pretrain and finetune in turn. A
reader thread watches both stores the whole time. Reproduce a failure with CLOZE_KILL_SEED.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from flows.core.artifacts import MANIFEST_FILE, ArtifactStore
from flows.core.config import compose_config
from flows.corpora import open_corpus
from flows.plan import PipelinePlan
from flows.stages.tokenizer import train_tokenizer
from lightning_modules.data.shard_format import ShardIndex, verify_shards
from lightning_modules.models.config import WEIGHTS_FILE
from tests.integration.servers import prefect_server

pytestmark = pytest.mark.slow
STAGES = ("tokenizer", "shards", "pretrain", "finetune")
SEED = int(os.environ.get("CLOZE_KILL_SEED", "7"))
TINY = [
    "experiment=smoke",
    "corpus.max_documents=300",
    "trainer.max_steps=20",
    "trainer.checkpoint_every_steps=5",
    "trainer.val_every_steps=10",
    "trainer.max_validation_sequences=16",
    "finetune.train_examples=64",
    "finetune.validation_examples=32",
]
STAGE_TIMEOUT = 240.0


class StoreReader(threading.Thread):
    """Polls artifact stores as a concurrent reader would, for as long as the test runs.

    A key directory without its manifest is a partial artifact made visible: a violation. It also
    timestamps when each stage's temp dir and manifest first appear, which is how the test knows
    which stage a run is in and how long a stage takes.
    """

    def __init__(self, roots: list[Path]) -> None:
        super().__init__(daemon=True)
        self.roots = roots
        self.violations: list[str] = []
        self.started: dict[tuple[Path, str], float] = {}
        self.published: dict[tuple[Path, str], float] = {}
        self.stale: set[Path] = set()
        self.done = threading.Event()

    def forget(self, root: Path) -> None:
        """Starts timing afresh for a new run on `root`; temp dirs a killed run left don't count."""
        for seen in (self.started, self.published):
            for entry in [entry for entry in seen if entry[0] == root]:
                del seen[entry]
        self.stale |= set((root / "artifacts").glob("*/.tmp-*"))

    def run(self) -> None:
        while not self.done.is_set():
            for root in self.roots:
                for stage in STAGES:
                    self.scan(root, stage)
            time.sleep(0.01)

    def scan(self, root: Path, stage: str) -> None:
        directory = root / "artifacts" / stage
        if not directory.is_dir():
            return
        now = time.monotonic()
        for entry in directory.iterdir():
            if entry.name.startswith(".tmp-") and entry not in self.stale:
                self.started.setdefault((root, stage), now)
            elif not entry.name.startswith("."):
                if (entry / MANIFEST_FILE).is_file():
                    self.published.setdefault((root, stage), now)
                elif entry.exists():
                    self.violations.append(f"{entry} visible without {MANIFEST_FILE}")


def pipeline(root: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "flows", *TINY, f"paths.root={root}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # the kill takes the whole group: dataloader and shard workers too
    )


def run_to_completion(root: Path, env: dict[str, str]) -> str:
    process = pipeline(root, env)
    output = process.communicate(timeout=400)[0]
    assert process.returncode == 0, output[-4000:]
    return output


def wait_for(condition: Any, process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + STAGE_TIMEOUT
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"run ended before {what}: {process.communicate()[0][-4000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def kill_inside(
    stage: str, delay: float, root: Path, env: dict[str, str], reader: StoreReader
) -> bool:
    """SIGKILLs a run `delay` seconds after `stage` starts; True if it had a checkpoint by then."""
    reader.forget(root)
    process = pipeline(root, env)
    wait_for(lambda: (root, stage) in reader.started, process, f"{stage} to start")
    target = reader.started[(root, stage)] + delay
    wait_for(lambda: time.monotonic() >= target, process, f"{delay:.2f}s into {stage}")
    checkpointed = any((root / "artifacts" / stage).glob(".work-*/checkpoints/*.ckpt"))
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert store_keys(root, stage) == [], f"{stage} finished before the kill: widen the margin"
    assert_no_partial_artifacts(root)
    return checkpointed


def store_keys(root: Path, stage: str) -> list[str]:
    directory = root / "artifacts" / stage
    if not directory.is_dir():
        return []
    return sorted(path.name for path in directory.iterdir() if not path.name.startswith("."))


def assert_no_partial_artifacts(root: Path) -> None:
    """Everything a reader can look up is whole: manifest, and the files it describes."""
    store = ArtifactStore(root / "artifacts")
    for stage in STAGES:
        for key in store_keys(root, stage):
            ref = store.lookup(stage, key)
            assert ref is not None, f"{stage}/{key} visible without a manifest"
            if stage == "shards":
                verify_shards(ref.path, ShardIndex.load(ref.path))
            if stage == "pretrain":
                assert load_file(str(ref.path / WEIGHTS_FILE))


def leftovers(root: Path) -> list[str]:
    return sorted(
        str(path.relative_to(root))
        for stage in STAGES
        for pattern in (".tmp-*", ".work-*")
        for path in (root / "artifacts" / stage).glob(pattern)
    )


def only_artifact(root: Path, stage: str) -> Path:
    keys = store_keys(root, stage)
    assert len(keys) == 1, f"{stage}: {keys}"
    return root / "artifacts" / stage / keys[0]


def outputs(path: Path) -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads((path / MANIFEST_FILE).read_text())["outputs"]
    return {name: value for name, value in recorded.items() if "seconds" not in name}


def assert_same_outputs(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    """Equal, floats to 1e-6: whatever the finetune stage records, a kill must not change it."""
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        if isinstance(value, float):
            assert actual[name] == pytest.approx(value, abs=1e-6), name
        else:
            assert actual[name] == value, name


def tokenizer_seconds(scratch: Path) -> float:
    """How long the tokenizer stage takes here, so its kill point falls inside it."""
    plan = PipelinePlan.from_config(compose_config([*TINY, f"paths.root={scratch}"]))
    started = time.monotonic()
    train_tokenizer(plan.tokenizer, open_corpus(plan.corpus), ArtifactStore(scratch))
    return time.monotonic() - started


def test_every_stage_killed_at_a_random_point_resumes_to_the_uninterrupted_result(
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    reader = StoreReader([reference, killed])
    reader.start()
    with prefect_server(tmp_path / "prefect") as api:
        env = {**os.environ, "PREFECT_API_URL": api}
        env.pop("PREFECT_HOME", None)
        kills = {"tokenizer": rng.uniform(0.1, 0.7) * tokenizer_seconds(tmp_path / "scratch")}
        kill_inside("tokenizer", kills["tokenizer"], reference, env, reader)
        reader.forget(reference)
        output = run_to_completion(reference, env)
        assert "tokenizer  [computed]" in output
        seconds = {
            stage: reader.published[(reference, stage)] - reader.started[(reference, stage)]
            for stage in STAGES
        }
        print(f"seed {SEED}: uninterrupted stage durations (s) {seconds}")
        # As published: the content folder and the input key's link to it (links kept as links).
        shutil.copytree(
            reference / "artifacts" / "tokenizer",
            killed / "artifacts" / "tokenizer",
            symlinks=True,
            dirs_exist_ok=True,
        )
        checkpointed = {}
        for stage in STAGES[1:]:
            kills[stage] = rng.uniform(0.1, 0.7) * seconds[stage]
            print(f"seed {SEED}: killing {stage} {kills[stage]:.2f}s into {seconds[stage]:.2f}s")
            checkpointed[stage] = kill_inside(stage, kills[stage], killed, env, reader)
        output = run_to_completion(killed, env)
    reader.done.set()
    reader.join()
    print(f"seed {SEED}: kill points (s after the stage began) {kills}, durations {seconds}")

    assert "finetune   [computed]" in output
    assert reader.violations == []
    assert leftovers(reference) == [] and leftovers(killed) == []
    for stage in STAGES:
        assert store_keys(killed, stage) == store_keys(reference, stage), stage
    ref_shards, new_shards = only_artifact(reference, "shards"), only_artifact(killed, "shards")
    data_files = sorted(p.name for p in ref_shards.iterdir() if p.name != MANIFEST_FILE)
    assert sorted(p.name for p in new_shards.iterdir() if p.name != MANIFEST_FILE) == data_files
    for name in data_files:
        assert (new_shards / name).read_bytes() == (ref_shards / name).read_bytes(), name
    assert outputs(new_shards) == outputs(ref_shards)

    ref_model, new_model = only_artifact(reference, "pretrain"), only_artifact(killed, "pretrain")
    assert outputs(new_model)["resumed"] is checkpointed["pretrain"]
    expected, actual = (
        load_file(str(ref_model / WEIGHTS_FILE)),
        load_file(str(new_model / WEIGHTS_FILE)),
    )
    assert actual.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.allclose(actual[name], tensor, atol=1e-6), name
    assert outputs(new_model)["val_loss"] == pytest.approx(outputs(ref_model)["val_loss"], abs=1e-6)

    assert_same_outputs(
        outputs(only_artifact(killed, "finetune")), outputs(only_artifact(reference, "finetune"))
    )
