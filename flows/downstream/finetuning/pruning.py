"""Dropping a grid rate that is clearly behind, instead of training it to its last epoch.

A per-arm grid trains each rate to early stopping, though a rate that trails the best one by a
wide margin after an epoch or two rarely catches up. Whether it does on a task, and what the rule
saves, is measured by replaying a finished run (benchmarks/grid_pruning.py; all-MiniLM-L6-v2 on
NCBI-disease in docs/results/2026-12-04-checkpoint-adaptation.md). This is the median stopping
rule of Google Vizier (Golovin et al. 2017) with one rival instead of the median: a later grid run
of a seed stops at the end of an epoch from `AFTER_EPOCHS` on when its best validation score so far
trails the best score the leader (the best finished run of that seed) had reached by the same
epoch by more than `finetune.grid_pruning_margin`. Runs are deterministic, so a pruned run's
epochs are exactly the first epochs of its full run: the choice it changes can be read off a full
grid's per-epoch scores (`would_prune`), which is how the margin's agreement was measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

AFTER_EPOCHS = 2  # every run is scored on validation this many times before it can be dropped


@dataclass(frozen=True)
class GridPruning:
    """The bar a later grid run of one seed must keep up with."""

    leader: tuple[float, ...]  # the leader's validation score after each of its epochs
    margin: float

    def bar(self, epoch: int) -> float:
        """The leader's best score by `epoch` (its final best past its last epoch), less the
        margin."""
        bests = list(accumulate(self.leader, max))
        return bests[min(epoch, len(bests)) - 1] - self.margin

    def behind(self, epoch: int, best: float) -> bool:
        """Whether a run whose best score by `epoch` is `best` is dropped now."""
        return epoch >= AFTER_EPOCHS and best < self.bar(epoch)


def would_prune(curve: Sequence[float], pruning: GridPruning) -> int | None:
    """The epoch at which a run with these per-epoch validation scores would have been dropped;
    None if it would have run to its end."""
    for epoch, best in enumerate(accumulate(curve, max), start=1):
        if pruning.behind(epoch, best):
            return epoch
    return None
