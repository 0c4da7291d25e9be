"""The collator an objective trains with: its selection (token, whole word or span) of the
run's tokens, word starts read from the tokenizer itself."""

from __future__ import annotations

from flows.stages.objectives import ObjectiveSettings
from flows.stages.tokenizer import TrainedTokenizer
from lightning_modules.data.collator import MaskingCollator
from lightning_modules.data.span_masking import SpanMaskingCollator, WholeWordMaskingCollator
from lightning_modules.data.word_boundaries import word_boundaries


def make_collator(
    settings: ObjectiveSettings, trained: TrainedTokenizer, seed: int
) -> MaskingCollator:
    """The collator for the configured selection; word starts come from the tokenizer itself."""
    common = (
        settings.rule,
        trained.vocab_size,
        trained.special.mask,
        trained.special.all(),
        seed,
    )
    if settings.selection == "token":
        return MaskingCollator(*common)
    boundaries = word_boundaries(trained.tokenizer, trained.settings.kind, trained.special.all())
    if settings.selection == "whole_word":
        return WholeWordMaskingCollator(*common, boundaries)
    return SpanMaskingCollator(*common, boundaries, settings.span_lengths)
