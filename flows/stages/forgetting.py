"""What a run forgot, with an interval: the general text's loss and accuracy before and after,
paired row by row (`pretrain.general_validation`).

The module keeps each general row's figures at every validation: the sum of its masked tokens'
losses, how many it predicted, and how many there are (`MaskedLanguageModelingModule.general_rows`).
The same rows under the same fixed masks are scored before and after, so the change is paired: a
replicate resamples the rows once (with replacement) and recomputes both token-weighted means on
that resample, as the downstream bootstrap does with test examples.

The rows are consecutive windows of the general text, so neighbours can share an article and
the interval treats them as independent: read it as the change's spread over this text's rows,
not over every text of its kind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from flows.core.artifacts import replace_json
from flows.downstream.statistics.bootstrap import bootstrap_lift, ratio

CONFIDENCE = 0.95
REPLICATES = 2000
INITIAL_ROWS_FILE = "initial_general_rows.json"
LOSS, CORRECT, TOKENS = range(3)  # the columns of a row's figures


def save_initial_rows(rows: torch.Tensor | None, work_dir: Path) -> None:
    """Step 0's rows, kept with step 0's figures so that a resumed run measures from them."""
    if rows is not None:
        replace_json(work_dir / INITIAL_ROWS_FILE, rows.tolist())


def initial_rows(work_dir: Path) -> torch.Tensor | None:
    """Step 0's rows as saved; None when off (or saved by a version that kept none)."""
    path = work_dir / INITIAL_ROWS_FILE
    return (
        torch.tensor(json.loads(path.read_text()), dtype=torch.float64) if path.is_file() else None
    )


def general_change_interval(
    before: torch.Tensor, after: torch.Tensor, seed: int
) -> dict[str, float]:
    """The paired bootstrap interval of after minus before for the general loss and accuracy
    (`loss_low`, `loss_high`, `accuracy_low`, `accuracy_high`, and the `confidence`)."""
    if before.shape != after.shape:
        raise ValueError(
            f"the general rows before {tuple(before.shape)} and after {tuple(after.shape)} "
            "differ: they must be the same rows under the same masks"
        )
    figures: dict[str, float] = {"confidence": CONFIDENCE}
    for name, column in (("loss", LOSS), ("accuracy", CORRECT)):
        low, high = bootstrap_lift(
            [after.numpy()], [before.numpy()], per_token(column), REPLICATES, CONFIDENCE, seed
        )
        figures[f"{name}_low"], figures[f"{name}_high"] = low, high
    return figures


def per_token(column: int) -> Callable[[np.ndarray], np.ndarray]:
    """A column's token-weighted mean over summed rows (`(replicates, 3)` totals)."""
    return lambda totals: ratio(totals[:, column], totals[:, TOKENS])
