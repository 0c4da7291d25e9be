"""The pretraining objective: which tokens are selected, when masks are drawn, what is learned.

One settings class covers the MLM family, so presets (`conf/objective/*.yaml`) differ only in
values: BERT's token masking, whole-word masking, SpanBERT's spans, static (BERT) or dynamic
(RoBERTa) masks, and ELECTRA's replaced-token detection on top of any of them. Plain data, no
torch: the collator each objective trains with is collators.py's.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import model_validator

from flows.core.settings import Number, Settings, bounds, one_of
from lightning_modules.data.masking_rules import MaskingRule, SpanLengths
from lightning_modules.models.config import ElectraConfig

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
    """A label for runs and tables (bert, roberta, ...), never part of an artifact key."""
    kind: Annotated[str, one_of(OBJECTIVE_KINDS)] = "mlm"
    """mlm (masked language modelling) | electra (replaced-token detection)."""
    selection: Annotated[str, one_of(SELECTIONS)] = "token"
    """What is masked: token | whole_word | span (SpanBERT)."""
    masking: Annotated[str, one_of(MASKINGS)] = "dynamic"
    """dynamic: new masks every batch (RoBERTa) | static: fixed per copy (BERT)."""
    static_copies: Annotated[int, bounds(ge=1)] = 10
    """static: copies of each sequence, each with its own fixed mask."""
    mask_rate: Number = 0.15
    """Share of the non-special tokens selected for the loss."""
    replace_with_mask: Number = 0.8
    """Of the selected tokens: share replaced by [MASK]."""
    replace_with_random: Number = 0.1
    """Of the selected tokens: share replaced by a random token (the rest stay as they are)."""
    span_p: Number = 0.2
    """span: SpanBERT's span length in words ~ Geometric(p), truncated at `span_max_words`."""
    span_max_words: int = 10
    """span: the longest span, in words."""
    generator_size_fraction: Number = 0.25
    """electra: the generator's width as a fraction of the discriminator's."""
    generator_hidden_size: int | None = None
    """electra: or the generator's width itself."""
    discriminator_weight: Number = 50.0
    """electra: loss = generator MLM loss + this x discriminator loss."""

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
