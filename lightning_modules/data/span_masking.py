"""Whole-word masking (BERT wwm) and span masking (SpanBERT): other selections, same 80/10/10.

Both collators only change `MaskingCollator.select`: they pick whole words (word starts come from
`word_boundaries`, since shards hold no word ids) and report each word or span as one unit, so
the shared `apply_replacement` gives all of its tokens the same action. Each row gets a budget of
max(1, round(mask_rate * non-special tokens)) tokens, as Google's `create_pretraining_data.py` and
HF's `DataCollatorForWholeWordMask` do (they also count [CLS]/[SEP], never predicted here); words
are taken first-fit, so a row ends below its budget only when no remaining word fits the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lightning_modules.data.collator import MaskingCollator
from lightning_modules.data.masking_rules import MaskingRule, SpanLengths
from lightning_modules.data.word_boundaries import WordBoundaries


@dataclass(frozen=True)
class WordLayout:
    """Per token of a [rows, width] batch: its word and where that word lies in the row."""

    index: torch.Tensor  # the word's number within the row
    start: torch.Tensor  # position of the word's first token
    end: torch.Tensor  # position of the word's last token
    length: torch.Tensor  # tokens in the word, at its first token; 0 elsewhere
    candidate: torch.Tensor  # True at the first token of each word that may be masked

    @classmethod
    def of(cls, starts: torch.Tensor, special: torch.Tensor) -> WordLayout:
        rows, width = starts.shape
        positions = torch.arange(width).expand(rows, width)
        start = torch.where(starts, positions, 0).cummax(dim=1).values
        is_last = torch.cat([starts[:, 1:], torch.ones(rows, 1, dtype=torch.bool)], dim=1)
        end = torch.where(is_last, positions, width).flip(1).cummin(dim=1).values.flip(1)
        return cls(
            index=starts.cumsum(dim=1) - 1,
            start=start,
            end=end,
            length=torch.where(starts, end - positions + 1, 0),
            candidate=starts & ~special,
        )


def selection_budget(special: torch.Tensor, mask_rate: float) -> torch.Tensor:
    """Tokens to select per row; float64 so that halves round as Python's `round` does."""
    eligible = (~special).sum(dim=1)
    budget = torch.round(eligible.double() * mask_rate).long().clamp(min=1)
    return torch.where(eligible > 0, budget, 0)


def first_fit(candidate: torch.Tensor, length: torch.Tensor, budget: torch.Tensor) -> torch.Tensor:
    """Walks each row left to right taking every candidate that still fits its budget.

    Google's loop, vectorised: one cumulative sum takes the longest prefix that fits, then each
    pass takes the next word that fits in every row, so passes are bounded by the word length.
    """
    lengths = torch.where(candidate, length, 0)
    taken = candidate & (lengths.cumsum(dim=1) <= budget[:, None])
    remaining = budget - torch.where(taken, lengths, 0).sum(dim=1)
    while True:
        fits = candidate & ~taken & (lengths <= remaining[:, None])
        rows = fits.any(dim=1).nonzero().squeeze(1)
        if len(rows) == 0:
            return taken
        first = fits[rows].int().argmax(dim=1)  # argmax returns the first maximum
        taken[rows, first] = True
        remaining[rows] -= lengths[rows, first]


class WholeWordMaskingCollator(MaskingCollator):
    """BERT's whole-word masking: words in random order, first-fit, never part of a word."""

    def __init__(
        self,
        rule: MaskingRule,
        vocab_size: int,
        mask_token_id: int,
        special_token_ids: Sequence[int],
        seed: int,
        boundaries: WordBoundaries,
    ) -> None:
        super().__init__(rule, vocab_size, mask_token_id, special_token_ids, seed)
        self.boundaries = boundaries

    def select(
        self, input_ids: torch.Tensor, special: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        words = WordLayout.of(self.boundaries.word_starts(input_ids), special)
        budget = selection_budget(special, self.rule.mask_rate)
        keys = torch.rand(input_ids.shape, generator=generator).masked_fill(~words.candidate, 2)
        order = keys.argsort(dim=1)  # a random order of each row's words, the others last
        taken = first_fit(words.candidate.gather(1, order), words.length.gather(1, order), budget)
        taken_starts = torch.zeros_like(taken).scatter(1, order, taken)
        width = input_ids.shape[1]
        word_ids = words.start + width * torch.arange(len(input_ids))[:, None]
        return taken_starts.gather(1, words.start), word_ids


def span_length_probabilities(lengths: SpanLengths) -> torch.Tensor:
    """P(length = k) for k = 1..max_words, as float64."""
    steps = torch.arange(lengths.max_words, dtype=torch.float64)
    weights = lengths.p * (1.0 - lengths.p) ** steps
    return weights / weights.sum()


class SpanMaskingCollator(MaskingCollator):
    """SpanBERT's span masking: runs of whole words until each row's budget is spent.

    Each pass starts one span in every row still under budget, at a word drawn uniformly among
    the unmasked words that fit the remaining budget, with a length drawn from `SpanLengths`. The
    span takes up to that many words, stopping before a special token (so it never crosses
    documents), before an already masked word, and before the first word that would exceed the
    budget. Span ids number spans in the order drawn (pass * rows + row).
    """

    def __init__(
        self,
        rule: MaskingRule,
        vocab_size: int,
        mask_token_id: int,
        special_token_ids: Sequence[int],
        seed: int,
        boundaries: WordBoundaries,
        lengths: SpanLengths | None = None,
    ) -> None:
        super().__init__(rule, vocab_size, mask_token_id, special_token_ids, seed)
        self.boundaries = boundaries
        self.lengths = lengths or SpanLengths()
        self._cumulative = span_length_probabilities(self.lengths).cumsum(dim=0)
        self._cumulative[-1] = 1.0  # so that every draw in [0, 1) lands on a length

    def select(
        self, input_ids: torch.Tensor, special: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        words = WordLayout.of(self.boundaries.word_starts(input_ids), special)
        remaining = selection_budget(special, self.rule.mask_rate)
        rows, width = input_ids.shape
        # One random rank and one span length per word, drawn up front: taking the highest-ranked
        # free word each pass is a uniform draw among the free words, as the ranks of words not
        # yet taken carry no information about which of them comes next.
        rank = torch.rand(input_ids.shape, generator=generator)
        draws = torch.rand(input_ids.shape, generator=generator, dtype=torch.float64)
        span_words = torch.searchsorted(self._cumulative, draws, right=True) + 1
        # A masked or special token costs more than any budget, so a span stops before it.
        cost = torch.where(special, width + 1, 1)
        untaken = words.candidate.clone()
        span_number = torch.zeros_like(input_ids)
        for number in range(width):  # each pass takes a word in every row with a free word
            free = untaken & (words.length <= remaining[:, None])
            if not free.any():
                break
            # A row without a free word starts at position 0, where its span costs too much.
            start = torch.where(free, rank, -1.0).argmax(dim=1, keepdim=True)
            offset = words.index - words.index.gather(1, start)
            in_span = (offset >= 0) & (offset < span_words.gather(1, start))
            cost_through_word = torch.where(in_span, cost, 0).cumsum(dim=1).gather(1, words.end)
            take = in_span & (cost_through_word <= remaining[:, None])
            cost.masked_fill_(take, width + 1)
            untaken.masked_fill_(take, False)
            span_number.masked_fill_(take, number)
            remaining -= take.sum(dim=1)
        selected = (cost > width) & ~special
        return selected, span_number * rows + torch.arange(rows)[:, None]
