"""The pretraining objective: which tokens are selected, when masks are drawn, what is learned.

One settings class covers the MLM family, so presets (`conf/objective/*.yaml`) differ only in
values: BERT's token masking, whole-word masking, SpanBERT's spans, static (BERT) or dynamic
(RoBERTa) masks, and ELECTRA's replaced-token detection on top of any of them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import model_validator

from flows.core.settings import Number, Settings, bounds, one_of
from flows.stages.tokenizer import TrainedTokenizer
from lightning_modules.data.collator import MaskingCollator, MaskingRule
from lightning_modules.data.span_masking import (
    SpanLengths,
    SpanMaskingCollator,
    WholeWordMaskingCollator,
)
from lightning_modules.data.word_boundaries import word_boundaries
from lightning_modules.models.electra import ElectraConfig

OBJECTIVE_KINDS = ("mlm", "electra")
SELECTIONS = ("token", "whole_word", "span")
MASKINGS = ("dynamic", "static")


class ObjectiveSettings(Settings):
    """`objective.*`; `name` is a label for runs and tables, never part of an artifact key.

    The ranges of the masking, span and ELECTRA keys are the library's own (`MaskingRule`,
    `SpanLengths`, `ElectraConfig` check them when built); this class builds them once up front.
    """

    section = "objective"
    name: str = "mlm"
    kind: Annotated[str, one_of(OBJECTIVE_KINDS)] = "mlm"
    selection: Annotated[str, one_of(SELECTIONS)] = "token"
    masking: Annotated[str, one_of(MASKINGS)] = "dynamic"
    static_copies: Annotated[int, bounds(ge=1)] = 10
    mask_rate: Number = 0.15
    replace_with_mask: Number = 0.8
    replace_with_random: Number = 0.1
    span_p: Number = 0.2
    span_max_words: int = 10
    generator_size_fraction: Number = 0.25
    generator_hidden_size: int | None = None
    discriminator_weight: Number = 50.0

    @model_validator(mode="after")
    def _parts_are_valid(self) -> ObjectiveSettings:
        self.rule, self.span_lengths, self.electra  # noqa: B018 - their checks raise ValueError
        return self

    @property
    def rule(self) -> MaskingRule:
        return MaskingRule(self.mask_rate, self.replace_with_mask, self.replace_with_random)

    @property
    def span_lengths(self) -> SpanLengths:
        return SpanLengths(self.span_p, self.span_max_words)

    @property
    def electra(self) -> ElectraConfig:
        return ElectraConfig(
            self.generator_size_fraction, self.generator_hidden_size, self.discriminator_weight
        )


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
