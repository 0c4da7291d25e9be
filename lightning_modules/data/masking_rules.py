"""The `objective.*` masking settings as plain data: how many tokens are selected and what
happens to them (`MaskingRule`), and SpanBERT's span lengths (`SpanLengths`).

No torch here: the objective's settings class checks a config with these before torch is
imported; the collators that apply them are collator.py and span_masking.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lightning_modules.models.config import doc


@dataclass(frozen=True)
class MaskingRule:
    """The `objective.*` settings: how many tokens to select and what to do with them (each
    field's default and description live here alone: flows/stages/objectives.py derives them)."""

    mask_rate: float = field(
        default=0.15, metadata=doc("Share of the non-special tokens selected for the loss.")
    )
    replace_with_mask: float = field(
        default=0.8, metadata=doc("Of the selected tokens: share replaced by [MASK].")
    )
    replace_with_random: float = field(
        default=0.1,
        metadata=doc(
            "Of the selected tokens: share replaced by a random token (the rest stay as they are)."
        ),
    )

    def __post_init__(self) -> None:
        for key in ("mask_rate", "replace_with_mask", "replace_with_random"):
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"objective.{key}={value!r} must be between 0 and 1")
        if self.mask_rate == 0.0:
            raise ValueError(
                "objective.mask_rate=0 selects no tokens, so there is nothing to learn"
            )
        if self.replace_with_mask + self.replace_with_random > 1.0 + 1e-9:
            raise ValueError(
                "objective.replace_with_mask + objective.replace_with_random must not exceed 1 "
                f"(got {self.replace_with_mask} + {self.replace_with_random})"
            )


@dataclass(frozen=True)
class SpanLengths:
    """SpanBERT's span lengths in words: Geometric(p) truncated to 1..max_words, renormalised.

    With p=0.2 and 10 words the mean is 3.8 words, the figure the SpanBERT paper reports.
    """

    p: float = field(
        default=0.2,
        metadata=doc(
            "span: SpanBERT's span length in words ~ Geometric(p), truncated at `span_max_words`."
        ),
    )
    max_words: int = field(default=10, metadata=doc("span: the longest span, in words."))

    def __post_init__(self) -> None:
        if not 0.0 < self.p <= 1.0:
            raise ValueError(f"objective.span_p={self.p!r} must be in (0, 1]")
        if self.max_words < 1:
            raise ValueError(f"objective.span_max_words={self.max_words} must be at least 1")
