from __future__ import annotations

import torch

from lightning_modules.data.collator import MaskingCollator
from lightning_modules.data.masking_rules import MaskingRule
from lightning_modules.data.resume import EpochShuffleSampler


def test_a_resumed_sampler_continues_the_same_epoch_order() -> None:
    sampler = EpochShuffleSampler(50, seed=1)
    sampler.set_epoch(2)
    full = list(sampler)
    assert sorted(full) == list(range(50))
    sampler.resume_at(epoch=2, start=20)
    assert list(sampler) == full[20:]
    assert list(sampler) == full  # the offset applies to the resumed pass only
    sampler.set_epoch(3)
    assert list(sampler) != full


def test_the_collator_replays_masks_from_a_saved_generator_state() -> None:
    collator = MaskingCollator(MaskingRule(), 100, 4, [0, 1, 2, 3, 4], seed=5)
    batches = [[torch.arange(10, 42)] for _ in range(4)]
    produced = [collator(batch)["input_ids"] for batch in batches]
    state = collator.generator_state_before(2)  # as if batch 2 was prefetched but not trained
    replay = MaskingCollator(MaskingRule(), 100, 4, [0, 1, 2, 3, 4], seed=5)
    replay.resume_at(2, state)
    assert torch.equal(replay(batches[2])["input_ids"], produced[2])
    assert torch.equal(replay(batches[3])["input_ids"], produced[3])
