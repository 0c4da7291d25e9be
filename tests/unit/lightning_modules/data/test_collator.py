"""The masking rule, checked statistically over many batches (3-sigma bounds)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_modules.data.collator import MaskingCollator
from lightning_modules.data.masking_rules import MaskingRule
from lightning_modules.models.config import IGNORE_INDEX

VOCAB = 500
SPECIALS = [0, 1, 2, 3, 4]
MASK_ID = 4


def make_batches(rule: MaskingRule, batches: int = 50, seed: int = 7):
    collator = MaskingCollator(rule, VOCAB, MASK_ID, SPECIALS, seed=seed)
    generator = torch.Generator().manual_seed(0)
    for _ in range(batches):
        original = torch.randint(5, VOCAB, (16, 64), generator=generator)
        original[:, 0] = 2  # [CLS]
        original[:, 31] = 3  # [SEP] mid-sequence
        original[:, -4:] = 0  # padding
        yield original, collator([row for row in original])


def within_three_sigma(count: int, trials: int, probability: float) -> bool:
    sigma = math.sqrt(trials * probability * (1 - probability))
    return abs(count - trials * probability) <= 3 * sigma


def test_selection_rate_and_80_10_10_split_hold_within_three_sigma() -> None:
    rule = MaskingRule()
    eligible = selected = masked = randomised = kept = 0
    for original, batch in make_batches(rule):
        chosen = batch["labels"] != IGNORE_INDEX
        eligible += int((~torch.isin(original, torch.tensor(SPECIALS))).sum())
        selected += int(chosen.sum())
        is_mask = batch["input_ids"] == MASK_ID
        masked += int((chosen & is_mask).sum())
        unchanged = batch["input_ids"] == original
        kept += int((chosen & unchanged).sum())
        randomised += int((chosen & ~is_mask & ~unchanged).sum())
    assert within_three_sigma(selected, eligible, 0.15)
    assert within_three_sigma(masked, selected, 0.8)
    # A random draw may hit the original token (1 in ~495), which then counts as kept.
    collision = 1 / (VOCAB - len(SPECIALS))
    assert within_three_sigma(randomised, selected, 0.1 * (1 - collision))
    assert within_three_sigma(kept, selected, 0.1 + 0.1 * collision)


def test_special_tokens_are_never_selected_and_labels_are_ignored_elsewhere() -> None:
    for original, batch in make_batches(MaskingRule(mask_rate=0.5), batches=10):
        labels = batch["labels"]
        special = torch.isin(original, torch.tensor(SPECIALS))
        assert (labels[special] == IGNORE_INDEX).all()
        assert (batch["input_ids"][special] == original[special]).all()
        chosen = labels != IGNORE_INDEX
        assert (labels[chosen] == original[chosen]).all()
        assert (batch["input_ids"][~chosen] == original[~chosen]).all()


def test_random_replacements_are_never_special_tokens() -> None:
    rule = MaskingRule(mask_rate=0.5, replace_with_mask=0.0, replace_with_random=1.0)
    for _, batch in make_batches(rule, batches=5):
        chosen = batch["labels"] != IGNORE_INDEX
        assert not torch.isin(batch["input_ids"][chosen], torch.tensor(SPECIALS)).any()


def test_same_seed_gives_same_masks_and_other_seed_differs() -> None:
    first = [batch["input_ids"] for _, batch in make_batches(MaskingRule(), 3, seed=1)]
    again = [batch["input_ids"] for _, batch in make_batches(MaskingRule(), 3, seed=1)]
    other = [batch["input_ids"] for _, batch in make_batches(MaskingRule(), 3, seed=2)]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mask_rate": 1.5}, "objective.mask_rate=1.5 must be between 0 and 1"),
        ({"mask_rate": -0.1}, "objective.mask_rate=-0.1 must be between 0 and 1"),
        ({"mask_rate": 0.0}, "objective.mask_rate=0 selects no tokens"),
        ({"replace_with_mask": 0.9, "replace_with_random": 0.2}, "must not exceed 1"),
    ],
)
def test_invalid_rules_name_the_config_key(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("+", r"\+")):
        MaskingRule(**kwargs)
