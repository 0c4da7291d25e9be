"""Both paths of the QA throughput benchmark train: a few steps on the same windows lower each
one's loss. A path whose optimizer barely moves (Cloze's once ran its 8 steps inside
OptimizerSettings' 200 warm-up steps, at under 4% of the rate) times steps that learn nothing, so
its tokens/s compares nothing. No speed is asserted."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from benchmarks.qa_throughput import PATHS, SQUAD_FILE
from flows.downstream.tasks.spec import default_data_dir

pytestmark = pytest.mark.skipif(
    not (default_data_dir() / SQUAD_FILE).is_file(), reason="shared data absent"
)

# The smallest shape the benchmark has, and a rate at which 8 steps of it learn visibly.
TINY = {"model": "bert-tiny", "batch_size": 4, "max_length": 64, "doc_stride": 16}
STEPS = 8
LEARNING_RATE = 1e-3


@pytest.fixture(scope="module")
def losses() -> dict[str, dict[str, Any]]:
    """Each path's first and last losses over the same 8 batches, in this process (the thread
    count left as it was)."""
    threads = torch.get_num_threads()
    return {
        name: run("32-true", STEPS, 1, threads, learning_rate=LEARNING_RATE, **TINY)
        for name, run in PATHS.items()
    }


@pytest.mark.parametrize("path", list(PATHS))
def test_each_path_lowers_its_loss(losses: dict[str, dict[str, Any]], path: str) -> None:
    first, last = losses[path]["loss_first"], losses[path]["loss_last"]
    # measured: both fall from about 4.6 to 2.7; a path that does not train stays at its start
    assert last < 0.9 * first, f"{path}: loss {first:.3f} over the first steps, {last:.3f} after"


def test_clozes_path_learns_as_fast_as_the_peer_on_the_same_windows(
    losses: dict[str, dict[str, Any]],
) -> None:
    falls = {name: run["loss_first"] - run["loss_last"] for name, run in losses.items()}
    assert falls["cloze"] > 0.5 * falls["transformers"], falls
