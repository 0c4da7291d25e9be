"""Property-based check of the collators over generated inputs: every masking strategy changes
only the tokens it selects, never a special one."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_modules.data.collator import MaskingCollator
from lightning_modules.data.masking_rules import MaskingRule
from lightning_modules.data.span_masking import SpanMaskingCollator, WholeWordMaskingCollator
from lightning_modules.data.word_boundaries import PrefixWordBoundaries
from lightning_modules.models.config import IGNORE_INDEX

SPECIAL = [0, 1, 2, 3, 4]
VOCAB = 60


def collators(rate: float, seed: int) -> list[MaskingCollator]:
    rule = MaskingRule(mask_rate=rate)
    opens = torch.arange(VOCAB) % 3 != 1  # ids 1, 4, 7, ... continue a word
    is_special = torch.zeros(VOCAB, dtype=torch.bool)
    is_special[SPECIAL] = True
    boundaries = PrefixWordBoundaries(opens, is_special)
    common = (rule, VOCAB, 4, SPECIAL, seed)
    return [
        MaskingCollator(*common),
        WholeWordMaskingCollator(*common, boundaries),
        SpanMaskingCollator(*common, boundaries),
    ]


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 6),
    width=st.integers(4, 40),
    rate=st.floats(0.05, 0.6),
    seed=st.integers(0, 2**16),
)
def test_every_collator_changes_only_selected_non_special_tokens(
    rows: int, width: int, rate: float, seed: int
) -> None:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (rows, width), generator=generator)
    special = torch.isin(ids, torch.tensor(SPECIAL))
    for collator in collators(rate, seed):
        batch = collator.mask(ids.clone(), torch.Generator().manual_seed(seed))
        selected = batch["labels"] != IGNORE_INDEX
        assert not (selected & special).any()
        assert torch.equal(batch["labels"][selected], ids[selected])
        assert torch.equal(batch["input_ids"][~selected], ids[~selected])
        replaced = batch["input_ids"][selected]
        assert not torch.isin(replaced, torch.tensor([0, 1, 2, 3])).any()
