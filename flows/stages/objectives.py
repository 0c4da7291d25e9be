"""The pretraining objective: which tokens are selected, when masks are drawn, what is learned.

One settings class covers the MLM family, so presets (`conf/objective/*.yaml`) differ only in
values: BERT's token masking, whole-word masking, SpanBERT's spans, static (BERT) or dynamic
(RoBERTa) masks, and ELECTRA's replaced-token detection on top of any of them. Plain data, no
torch: the collator each objective trains with is collators.py's.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import model_validator

from flows.core.settings import bounds, library_config, one_of, settings_of
from lightning_modules.data.masking_rules import MaskingRule, SpanLengths
from lightning_modules.models.config import ElectraConfig

OBJECTIVE_KINDS = ("mlm", "electra")
SELECTIONS = ("token", "whole_word", "span")
MASKINGS = ("dynamic", "static")


# The library's configs the objective's keys are (their one home): the masking rule, SpanBERT's
# span lengths (as `span_*`), ELECTRA's generator and loss weight.
LIBRARY_KEYS = settings_of(
    ElectraConfig, base=settings_of(SpanLengths, prefix="span_", base=settings_of(MaskingRule))
)


class ObjectiveSettings(LIBRARY_KEYS):  # type: ignore[misc,valid-type]
    """`objective.*`; `name` is a label for runs and tables, never part of an artifact key.

    The masking, span and ELECTRA keys are `MaskingRule`'s, `SpanLengths`' and
    `ElectraConfig`'s fields; those check them when built, which this class does once up front.
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

    @model_validator(mode="after")
    def _parts_are_valid(self) -> ObjectiveSettings:
        self.rule, self.span_lengths, self.electra  # noqa: B018 - their checks raise ValueError
        return self

    @property
    def rule(self) -> MaskingRule:
        return library_config(self, MaskingRule)

    @property
    def span_lengths(self) -> SpanLengths:
        return library_config(self, SpanLengths, "span_")

    @property
    def electra(self) -> ElectraConfig:
        return library_config(self, ElectraConfig)
