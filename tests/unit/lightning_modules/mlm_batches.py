"""A tiny masked-LM module with a head warm-up, and random masked batches, for module tests."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from lightning_modules.mlm import MaskedLanguageModelingModule, ThroughputSettings
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.optim_settings import OptimizerSettings

HEAD_ONLY, TOTAL = 3, 6


def batches(count: int, seed: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    made = []
    for _ in range(count):
        ids = torch.randint(5, 120, (4, 16), generator=generator)
        labels = torch.full_like(ids, -100)
        labels[:, ::4] = ids[:, ::4]
        made.append({"input_ids": ids, "labels": labels, "attention_mask": torch.ones_like(ids)})
    return made


def loader(items: list[dict[str, torch.Tensor]]) -> DataLoader[Any]:
    return DataLoader(items, batch_size=None)  # type: ignore[arg-type]


def warmup_module() -> MaskedLanguageModelingModule:
    torch.manual_seed(0)
    model = BertForMaskedLM(
        EncoderConfig(120, hidden_size=16, num_heads=2, intermediate_size=32, num_layers=2)
    )
    settings = OptimizerSettings(
        learning_rate=1e-2,
        total_steps=TOTAL,
        head_only_steps=HEAD_ONLY,
        weight_decay=0.1,
        warmup_steps=0,
    )
    return MaskedLanguageModelingModule(model, settings, ThroughputSettings(100, 1.0))
