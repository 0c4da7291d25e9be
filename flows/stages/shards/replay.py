"""Sharding the replay (`corpus.replay`): which general-text documents join the training rows.

The replay files are encoded as units like the corpus's (same readers, cleaning, exclusions and
tokenizer), then deduplicated against every corpus document and each other. Of what is left, the
documents are taken in the order of their text's hash (a shuffle fixed by the text: no seed, so
the shards stay shared by every pretraining seed, and a sample spread over all the files rather
than the first ones) until they hold the tokens that make `share` of the training rows:
`share / (1 - share)` times the corpus's. The stage packs them into rows of their own after the
corpus's rows, so the corpus's rows are byte for byte those of a run without replay; the
training sampler shuffles all rows every epoch.

A replay too small for the share is refused, never repeated: repeated text is worth less than
new text, so a repeated replay would hold `share` of the tokens but not of the information.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from flows.corpora.formats import CorpusInputError
from flows.corpora.replay import KEY
from flows.stages.shards.units import UnitResult


@dataclass(frozen=True)
class ReplayChoice:
    """The replay documents chosen, per unit, and what the replay offered."""

    chosen: list[np.ndarray]  # per unit, a mask over its documents taken whole
    available_tokens: int  # row tokens of every replay document left after dedupe
    # The document that crosses the target, (unit, document, tokens): its first tokens are taken,
    # last, so the share is met to the token rather than to the document (an article can hold
    # thousands). None when whole documents meet it.
    cut: tuple[int, int, int] | None


def replay_target(share: float, domain_tokens: int) -> float:
    """The replay tokens that make `share` of the training rows' tokens beside `domain_tokens`."""
    return share / (1 - share) * domain_tokens


def choose_replay(
    results: list[UnitResult],
    first_occurrences: Callable[[np.ndarray], np.ndarray],
    held: Callable[[np.ndarray], np.ndarray],
    share: float,
    domain_tokens: int,
) -> ReplayChoice:
    """The replay documents, in their hash order, whose row tokens (`held`) reach the target,
    the last one cut to it; `first_occurrences` drops the duplicates of any document seen
    before, the corpus's included."""
    kept = [first_occurrences(result.array("keys")) for result in results]
    pairs = list(zip(results, kept, strict=True))
    keys = np.concatenate([result.array("keys")[mask] for result, mask in pairs])
    tokens = np.concatenate([held(result.array("lengths"))[mask] for result, mask in pairs])
    units = np.concatenate([np.full(int(mask.sum()), unit) for unit, mask in enumerate(kept)])
    documents = np.concatenate([np.flatnonzero(mask) for mask in kept])
    target = replay_target(share, domain_tokens)
    available = int(tokens.sum())
    if available < target:
        raise CorpusInputError(too_small(share, domain_tokens, target, available, len(results)))
    order = np.argsort(keys, kind="stable")
    totals = np.cumsum(tokens[order])
    last = int(np.searchsorted(totals, target))  # the first document reaching the target
    crossing = order[last]
    needed = round(target - (totals[last - 1] if last else 0))
    whole = last + 1 if needed >= tokens[crossing] else last
    picked = np.zeros(len(keys), dtype=bool)
    picked[order[:whole]] = True
    cut = None
    if whole == last and needed > 0:
        cut = (int(units[crossing]), int(documents[crossing]), needed)
    chosen = [np.zeros(len(mask), dtype=bool) for mask in kept]
    for unit, document in zip(units[picked], documents[picked], strict=True):
        chosen[unit][document] = True
    return ReplayChoice(chosen, available, cut)


def too_small(share: float, domain_tokens: int, target: float, available: int, files: int) -> str:
    """Says what the share needs, what the files hold, and the largest share they can give."""
    fits = available / (available + domain_tokens)
    return (
        f"{KEY}.share={share} needs {round(target):,} replay tokens beside the corpus's "
        f"{domain_tokens:,} training tokens, but {KEY}.paths ({files} file(s)) hold "
        f"{available:,} after cleaning and dedupe; add general text or lower {KEY}.share "
        f"(at most {fits:.3f} fits). A replay is never repeated"
    )
