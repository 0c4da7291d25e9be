"""The pretraining objective: which tokens are selected, when masks are drawn, what is learned.

One settings class covers the MLM family, so presets (`conf/objective/*.yaml`) differ only in
values: BERT's token masking, whole-word masking, SpanBERT's spans, static (BERT) or dynamic
(RoBERTa) masks, and ELECTRA's replaced-token detection on top of any of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from flows.core.settings import ConfigError
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


@dataclass(frozen=True)
class ObjectiveSettings:
    """`objective.*`; `name` is a label for runs and tables, never part of an artifact key."""

    name: str = "mlm"
    kind: str = "mlm"
    selection: str = "token"
    masking: str = "dynamic"
    static_copies: int = 10
    mask_rate: float = 0.15
    replace_with_mask: float = 0.8
    replace_with_random: float = 0.1
    span_p: float = 0.2
    span_max_words: int = 10
    generator_size_fraction: float = 0.25
    generator_hidden_size: int | None = None
    discriminator_weight: float = 50.0

    def __post_init__(self) -> None:
        for key, allowed in (
            ("kind", OBJECTIVE_KINDS),
            ("selection", SELECTIONS),
            ("masking", MASKINGS),
        ):
            if getattr(self, key) not in allowed:
                raise ConfigError(
                    f"objective.{key}={getattr(self, key)!r} must be one of {allowed}"
                )
        if self.static_copies < 1:
            raise ConfigError(f"objective.static_copies={self.static_copies} must be >= 1")
        try:
            self.rule, self.span_lengths, self.electra  # noqa: B018 - validates the parts
        except ValueError as error:
            raise ConfigError(str(error)) from error

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
