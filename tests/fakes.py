"""Helpers shared by the tests (conftest.py hands them out as fixtures or re-exports them).

Synthetic text built from Greek letter names, a clock that moves only when slept on, and the
comparison of an exported model's logits against `transformers`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

GREEK_LETTERS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "chi",
    "psi",
    "omega",
)


def greek_text(
    paragraphs: int,
    seed: int = 0,
    words: Sequence[str] = GREEK_LETTERS,
    length: tuple[int, int] = (8, 40),
) -> str:
    """`paragraphs` blank-line-separated paragraphs of `length[0]` to `length[1] - 1` words
    drawn from `words`, the same for the same seed."""
    rng = np.random.default_rng(seed)
    chosen = [rng.choice(list(words), size=int(rng.integers(*length))) for _ in range(paragraphs)]
    return "\n\n".join(" ".join(paragraph) for paragraph in chosen)


class FakeClock:
    """A monotonic clock that moves only when slept on: budgets checked without waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def logits_match(
    ours: Callable[[Any, Any], Any], theirs: Any, vocab_size: int, atol: float = 1e-4
) -> bool:
    """Our forward pass against a `transformers` model on a padded batch: the padded row is
    compared on its real tokens only (what padding does there is nobody's business)."""
    import torch

    input_ids = torch.randint(5, vocab_size, (2, 12))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 9:] = 0
    with torch.no_grad():
        mine = ours(input_ids, attention_mask)
        reference = theirs(input_ids=input_ids, attention_mask=attention_mask).logits
    return torch.allclose(mine[0], reference[0], atol=atol) and torch.allclose(
        mine[1, :9], reference[1, :9], atol=atol
    )
