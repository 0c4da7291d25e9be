"""The general text's figures row by row (`pretrain.general_validation`): what lets the change in
the general loss between two validations have an interval (flows/stages/forgetting.py).

Every validation keeps each general row's loss sum, correct predictions and masked tokens,
indexed by the row's place in the set (`GENERAL_ROW`), whatever order or rank scored it; the rows
at the head warm-up's end are the "before" and survive a resume."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from lightning_modules.data.mlm_datamodule import GENERAL_ROW, FixedMaskDataset
from lightning_modules.mlm import MaskedLanguageModelingModule
from tests.fakes import quiet_trainer
from tests.unit.lightning_modules.mlm_batches import (
    TOTAL,
    batches,
    loader,
    warmup_module,
)

ROWS = 8


def general_loader(order: list[int]) -> DataLoader[Any]:
    """The same 8 masked rows (every 3rd position labelled; row 6 has none: zero sums, not an
    error), as the data module holds them, read in batches of 4 in `order`."""
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(5, 120, (ROWS, 16), generator=generator)
    labels = torch.full_like(ids, -100)
    labels[:, ::3] = ids[:, ::3]
    labels[6] = -100
    rows = FixedMaskDataset(
        {
            "input_ids": ids,
            "labels": labels,
            "attention_mask": torch.ones_like(ids),
            GENERAL_ROW: torch.arange(ROWS),
        }
    )
    return DataLoader(rows, batch_size=4, sampler=order)


def general_module() -> MaskedLanguageModelingModule:
    module = warmup_module()
    module.general_validation = True
    return module


def validated(module: MaskedLanguageModelingModule, order: list[int]) -> dict[str, float]:
    loaders = [loader(batches(2, 1)), general_loader(order)]
    return quiet_trainer(1).validate(module, loaders, verbose=False)[0]


def test_each_general_row_is_kept_and_the_rows_add_up_to_the_logged_figures() -> None:
    module = general_module()
    figures = validated(module, list(range(ROWS)))
    rows = module.general_rows
    assert rows is not None and rows.shape == (ROWS, 3)
    assert rows[:, 2].tolist() == [6.0] * 6 + [0.0] + [6.0]  # masked tokens: positions 0, 3, ...
    loss, correct, tokens = rows.sum(0).tolist()
    assert figures["val_general/loss"] == pytest.approx(loss / tokens)
    assert figures["val_general/accuracy"] == pytest.approx(correct / tokens)


def test_a_row_keeps_its_place_whatever_order_its_batch_came_in() -> None:
    """Ranks score strided rows: the row's index, not the batch order, places its figures."""
    module = general_module()
    validated(module, list(range(ROWS)))
    in_order = module.general_rows
    validated(module, [5, 2, 7, 0, 3, 6, 1, 4])
    assert module.general_rows is not None and in_order is not None
    assert torch.allclose(module.general_rows, in_order)  # not summed onto the last validation


def test_the_rows_at_the_warmup_end_are_the_before_and_survive_a_resume() -> None:
    module = general_module()
    loaders = [loader(batches(2, 1)), general_loader(list(range(ROWS)))]
    quiet_trainer(TOTAL).fit(module, loader(batches(TOTAL, 0)), loaders)
    at_warmup_end = module.head_warmup_general_rows
    assert at_warmup_end is not None and at_warmup_end.shape == (ROWS, 3)
    loss, _, tokens = at_warmup_end.sum(0).tolist()
    assert module.head_warmup_validation["val_general/loss"] == pytest.approx(loss / tokens)
    assert module.general_rows is not None
    assert not torch.allclose(module.general_rows, at_warmup_end)  # the run moved on

    checkpoint: dict[str, object] = {}
    module.on_save_checkpoint(checkpoint)
    resumed = general_module()
    resumed.on_load_checkpoint(checkpoint)
    assert resumed.head_warmup_general_rows is not None
    assert torch.equal(resumed.head_warmup_general_rows, at_warmup_end)
