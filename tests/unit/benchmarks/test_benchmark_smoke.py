"""Every benchmark runs end to end, for seconds, on a tiny shape: a published figure can always be
re-run. `time_to_quality` once died at its first step after the plan's model section became typed,
and only its imports were checked. Each row runs the benchmark as a person does
(`python -m benchmarks.<name> ...`), both paths where it compares two; no speed is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import REPO
from tests.integration.cli_runs import local_env

pytestmark = pytest.mark.slow

# The demo's config made small enough for a run of seconds (finetune_ceiling, finetune_runs).
SMALL_DEMO = [
    "experiment=smoke",  # 300 train examples: the 12 batches finetune_ceiling times a step on
    "corpus.max_documents=300",
    "finetune.validation_examples=40",
    "finetune.test_examples=40",
]
# A pipeline of two pretraining steps (recipe_sweep screens up to pretrain).
TWO_STEPS = (
    "experiment=smoke trainer.max_steps=2 trainer.warmup_steps=1 trainer.val_every_steps=2 "
    "trainer.checkpoint_every_steps=2"
)
# benchmark -> its arguments for a run of seconds ({work} a scratch folder), both paths kept.
SMOKE_ARGUMENTS = {
    "shard_throughput": ["--sizes-mb=1", "--num-proc=1", "--repeats=1", "--work-dir={work}"],
    "recipe_speed": ["--rounds=1", "--steps=1", "--only=batch 16"],
    "modernbert_memory": ["--seq-len=128", "--tokens-per-step=256"],
    "checkpoint_import": ["--repeats=1", "--layers=1", "--hidden-size=64"],  # both loaders
    "modernbert_throughput": [  # Cloze's paths and transformers', and the layer costs
        "--lengths=64",
        "--tokens-per-step=128",
        "--steps=1",
        "--warmup=0",
        "--layer-repeats=1",
    ],
    "train_throughput": [  # Cloze's Trainer against the transformers loop
        "--models=bert-tiny",
        "--paths=transformers dense fp32,cloze fp32",
        "--steps=1",
        "--warmup=0",
        "--profile-steps=0",
        "--threads=1",
        "--corpus-chars=200000",
        "--work-dir={work}",
    ],
    "finetune_runs": [
        "--runs=1",
        "--epochs=1",
        "--work-dir={work}",
        *SMALL_DEMO,
        "finetune.train_examples=40",
    ],
    "finetune_ceiling": ["--models=bert-tiny", "--epochs=1", "--work-dir={work}", *SMALL_DEMO],
    "recipe_sweep": [  # two override sets, the second reusing the first's tokenizer and shards
        "{work}/sweep.jsonl",
        f"{TWO_STEPS} paths.root={{work}}/run",
        f"{TWO_STEPS} paths.root={{work}}/run trainer.learning_rate=1e-3",
    ],
    # A Prefect server, an MLflow server and three served flows, one run each: Cloze's tokenizer
    # deployment (tracking to SQLite, then to the MLflow server) and its peer, bare_served_flow.
    "served_start": ["--runs=1", "--start-timeout=600"],
}
# Covered elsewhere: grid_pruning (tests/unit/benchmarks/test_grid_pruning.py), qa_throughput
# (tests/unit/benchmarks/test_qa_throughput.py), time_to_quality (test_time_to_quality.py);
# bare_served_flow serves until stopped, with no run of its own: served_start's row serves,
# triggers and times it (its line in PATHS_TIMED).
COVERED_ELSEWHERE = ("qa_throughput", "time_to_quality", "grid_pruning", "bare_served_flow")
# benchmark -> the start of the line each of its paths prints once timed, where an exit 0 alone
# would not show that every path ran.
PATHS_TIMED = {
    "served_start": (  # each served flow reached its first stage
        "cloze, SQLite, run 1: .*first stage",
        "cloze, MLflow server, run 1: .*first stage",
        "bare Prefect flow, run 1: .*first stage",
    ),
}


def scripts() -> list[str]:
    """The benchmarks a person runs (`if __name__ == "__main__"`)."""
    return sorted(
        path.stem
        for path in (REPO / "benchmarks").glob("*.py")
        if 'if __name__ == "__main__"' in path.read_text()
    )


def test_every_benchmark_script_has_a_smoke_run() -> None:
    assert sorted([*SMOKE_ARGUMENTS, *COVERED_ELSEWHERE]) == scripts()


@pytest.mark.parametrize("name", sorted(SMOKE_ARGUMENTS))
def test_the_benchmark_runs_end_to_end_on_a_tiny_shape(tmp_path: Path, name: str) -> None:
    arguments = [argument.format(work=tmp_path) for argument in SMOKE_ARGUMENTS[name]]
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *arguments],
        cwd=REPO,
        # Its own home, Prefect server and MLflow store; the server given time to start beside
        # the suite's work (as tests/integration/test_evaluate.py gives it).
        env=local_env(tmp_path / "home", PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="600"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for line in PATHS_TIMED.get(name, ()):
        assert re.search(f"^{line}", done.stdout, re.MULTILINE), done.stdout[-3000:]
