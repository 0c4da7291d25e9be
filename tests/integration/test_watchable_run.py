"""A run a person can watch: `cloze run --until`, step lines with an ETA, bars at a terminal."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cli_runs import local_env

TINY = [
    "experiment=smoke",
    "corpus.max_documents=800",
    "trainer.max_steps=20",
    "trainer.val_every_steps=20",
    "finetune.train_examples=100",
]
FIRST_STEP = re.compile(
    r"cloze\.training: pretrain step 1/(\d+) elapsed=\d+s eta=(\d+h)?(\d+m)?\d+s "
    r"tokens_per_second=[\d.e+]+ "
)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("watchable")


def cloze(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`cloze ARGS` as the console script runs it (`flows.cloze:main`), without a terminal."""
    return subprocess.run(
        [sys.executable, "-m", "flows.cloze", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=local_env(home),
    )


def test_cloze_run_until_shards_stops_after_shards(home: Path) -> None:
    result = cloze(home, "run", *TINY, "--until", "shards")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "shards: computed, key " in output
    assert "pretrain: started" not in output and "finetune" not in output
    summary = output[output.index("Cloze pipeline summary") :].splitlines()
    assert summary[1].startswith("  tokenizer  [computed] vocab 2000")
    assert summary[2].startswith("  shards     [computed] train ")
    assert summary[3].startswith("MLflow: experiment 'cloze'")


def test_an_unreachable_tracking_server_is_one_line_naming_the_log_with_the_traceback(
    tmp_path: Path,
) -> None:
    """Prefect's report of the failed flow run printed about 130 lines of traceback first."""
    uri = "http://127.0.0.1:9"  # nothing listens on the discard port
    quick = ["tracking.retry_attempts=2", "tracking.retry_deadline_seconds=3"]
    result = cloze(tmp_path, "run", *TINY, "--until", "tokenizer", f"tracking.uri={uri}", *quick)
    output = result.stdout + result.stderr
    assert result.returncode == 3, output[-3000:]
    assert "Traceback" not in output and len(output.splitlines()) <= 8, output
    [error] = [line for line in output.splitlines() if line.startswith("error:")]
    assert error.startswith(f"error: MLflow at {uri} did not answer ")
    [log_file] = (tmp_path / "logs").glob("*-bert-tiny-smoke-pydoc.log")
    assert error.endswith(f" (the traceback: {log_file})")
    kept = log_file.read_text()
    assert "Traceback (most recent call last)" in kept and "TrackingUnavailableError" in kept


@pytest.mark.slow
def test_every_pretrain_line_carries_its_eta_from_the_first_step(home: Path) -> None:
    result = cloze(home, "run", *TINY, "trainer.max_steps=30", "--until", "pretrain")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "cloze.training: pretrain plan: 30 steps x 1,024 tokens = 0.0307 M" in output
    assert FIRST_STEP.search(output), output[-3000:]
    assert re.search(r"pretrain: steps 11-20 took \S+, after 10 warm-up steps \(\S+\): ", output)
    # shards computed here or reused from the test above: whichever ran first (`-m slow` or not)
    assert re.search(r"shards: (computed|reused \(cache hit\))", output), output[-3000:]
    assert "finetune: started" not in output


@pytest.mark.slow
def test_at_a_terminal_each_training_stage_shows_a_bar(home: Path) -> None:
    """`script` gives the run a pseudo-terminal, as a person's shell would."""
    command = shlex.join([sys.executable, "-m", "flows.cloze", "run", *TINY, "seed=1"])
    result = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        capture_output=True,
        text=True,
        timeout=900,
        env=local_env(home),
    )
    screen = result.stdout
    assert result.returncode == 0, screen[-3000:]
    assert re.search(r"pretrain: 100%\|[^|]*\| 20/20 \[\d\d:\d\d<00:00, ", screen), screen[-3000:]
    assert "tokens_per_second=" in screen
    assert re.search(r"finetune/pydoc_topics/pretrained-lr0\.001-seed\d+: 100%", screen)
    assert re.search(r"finetune/pydoc_topics/random_init grid: 100%\|[^|]*\| 1/1 ", screen)
