"""BERT masking, vectorised over the whole batch.

Masking happens per batch (dynamic masking, as RoBERTa) so changing the mask rate never requires
new shards. Each DataLoader worker derives its own generator from the base seed, so runs are
reproducible for a fixed worker count without workers drawing identical masks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import torch

from lightning_modules.data.masking_rules import MaskingRule
from lightning_modules.models.config import IGNORE_INDEX


class MaskingCollator:
    """Stacks token sequences and applies the 80/10/10 rule to a random selection of tokens."""

    def __init__(
        self,
        rule: MaskingRule,
        vocab_size: int,
        mask_token_id: int,
        special_token_ids: Sequence[int],
        seed: int,
    ) -> None:
        self.rule = rule
        self.mask_token_id = mask_token_id
        self.special_token_ids = torch.tensor(sorted(set(special_token_ids)), dtype=torch.long)
        is_special = torch.zeros(vocab_size, dtype=torch.bool)
        is_special[self.special_token_ids] = True
        self.random_candidates = (~is_special).nonzero().squeeze(1)
        self.seed = seed
        self._generator: torch.Generator | None = None
        self.batches_produced = 0
        # Generator states before the last few batches: the loader prefetches ahead of training,
        # so a checkpoint needs the state from before the first batch not yet trained on.
        self._recent_states: deque[tuple[int, torch.Tensor]] = deque(maxlen=8)

    def __call__(self, sequences: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        generator = self._worker_generator()
        self._recent_states.append((self.batches_produced, generator.get_state()))
        self.batches_produced += 1
        return self.mask(torch.stack(list(sequences)).long(), generator)

    def generator_state_before(self, batch_number: int) -> torch.Tensor:
        for number, state in self._recent_states:
            if number == batch_number:
                return state
        return self._worker_generator().get_state()

    def resume_at(self, batch_number: int, generator_state: torch.Tensor) -> None:
        self._worker_generator().set_state(generator_state)
        self.batches_produced = batch_number

    def _worker_generator(self) -> torch.Generator:
        if self._generator is None:
            info = torch.utils.data.get_worker_info()
            worker_id = 0 if info is None else info.id + 1
            self._generator = torch.Generator().manual_seed(self.seed * 1_000_003 + worker_id)
        return self._generator

    def mask(self, input_ids: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """Returns masked `input_ids` and `labels` (original ids where selected, -100 elsewhere)."""
        special = torch.isin(input_ids, self.special_token_ids)
        selected, unit_ids = self.select(input_ids, special, generator)
        return self.apply_replacement(input_ids, selected, unit_ids, generator)

    def select(
        self, input_ids: torch.Tensor, special: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Which tokens to predict, and the unit each belongs to (here: each token its own).

        Unit ids lie in [0, input_ids.numel()); all tokens of a unit get the same 80/10/10 action.
        """
        draws = torch.rand(input_ids.shape, generator=generator)
        selected = (draws < self.rule.mask_rate) & ~special
        return selected, torch.arange(input_ids.numel()).view(input_ids.shape)

    def apply_replacement(
        self,
        input_ids: torch.Tensor,
        selected: torch.Tensor,
        unit_ids: torch.Tensor,
        generator: torch.Generator,
    ) -> dict[str, torch.Tensor]:
        """The 80/10/10 rule, one action per unit; random replacements are drawn per token."""
        labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
        action = torch.rand(input_ids.numel(), generator=generator)[unit_ids]
        to_mask = selected & (action < self.rule.replace_with_mask)
        random_upper = self.rule.replace_with_mask + self.rule.replace_with_random
        to_random = selected & (action >= self.rule.replace_with_mask) & (action < random_upper)

        masked = input_ids.clone()
        masked[to_mask] = self.mask_token_id
        picks = torch.randint(
            len(self.random_candidates), (int(to_random.sum()),), generator=generator
        )
        masked[to_random] = self.random_candidates[picks]
        return {"input_ids": masked, "labels": labels}
