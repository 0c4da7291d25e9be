from __future__ import annotations

import torch

from lightning_modules.data.collator import MaskingCollator
from lightning_modules.data.masking_rules import MaskingRule
from lightning_modules.data.static_masking import StaticCopies, StaticMaskCollator

SPECIAL = [0, 1, 2, 3, 4]


def test_each_copy_keeps_its_mask_and_copies_differ() -> None:
    sequences = [torch.arange(5, 69) + i for i in range(6)]
    copies = StaticCopies(sequences, copies=3)  # type: ignore[arg-type]
    collate = StaticMaskCollator(MaskingCollator(MaskingRule(), 200, 4, SPECIAL, seed=0), seed=0)
    assert len(copies) == 18
    first = collate([copies[j] for j in (0, 7, 13)])
    again = collate([copies[j] for j in (13, 0, 7)])  # another batch, another order
    assert torch.equal(first["labels"][0], again["labels"][1])
    assert torch.equal(first["input_ids"][2], again["input_ids"][0])
    # Items 1, 7 and 13 are the three copies of sequence 1: the same text, three masks.
    masks = collate([copies[j] for j in (1, 7, 13)])["labels"] != -100
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])
