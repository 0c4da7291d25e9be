"""Mixed-precision training with fused AdamW still clips gradients (flows/training/precision.py):
bf16-mixed on the CPU and, `gpu`-marked, on a CUDA device through the same code; 16-mixed (a GPU
without native bf16), whose gradients are unscaled before the clip, on both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from flows.training.settings import TrainerSettings
from flows.training.trainer import make_trainer
from lightning_modules.mlm import MaskedLanguageModelingModule, ThroughputSettings
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.optim_settings import OptimizerSettings

CLIP = 0.05  # far below the gradient norm of an untrained model, so every step is clipped


class GradientNorms(pl.Callback):
    """The total gradient norm the optimizer sees (after clipping) and whether it is fused."""

    def __init__(self) -> None:
        self.norms: list[float] = []
        self.fused: list[bool] = []

    def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
        grads = torch.stack([p.grad.norm() for p in module.parameters() if p.grad is not None])
        self.norms.append(float(torch.linalg.vector_norm(grads)))
        self.fused.append(bool(trainer.optimizers[0].defaults.get("fused")))


def batches(steps: int, vocab: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(steps):
        ids = torch.randint(5, vocab, (4, 16), generator=generator)
        labels = torch.where(torch.rand(4, 16, generator=generator) < 0.3, ids, -100)
        rows.append({"input_ids": ids, "labels": labels})
    return rows


def train_clipped(tmp_path: Path, accelerator: str, precision: str = "bf16-mixed") -> GradientNorms:
    """A few mixed-precision steps of a tiny MLM through the project's Trainer factory."""
    config = EncoderConfig(
        vocab_size=64, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64
    )
    steps = 4
    module = MaskedLanguageModelingModule(
        BertForMaskedLM(config),
        OptimizerSettings(learning_rate=1e-3, total_steps=steps, warmup_steps=0),
        ThroughputSettings(every_steps=steps, flops_per_token=1.0),
    )
    settings = TrainerSettings(
        max_steps=steps,
        warmup_steps=0,
        grad_clip=CLIP,
        accelerator=accelerator,
    ).model_copy(update={"precision": precision})  # 16-mixed on a CPU: the settings refuse it
    norms = GradientNorms()
    trainer = make_trainer(settings, tmp_path, [], [norms], max_steps=steps)
    loader = DataLoader(batches(steps, config.vocab_size), batch_size=None)
    trainer.fit(module, train_dataloaders=loader)
    return norms


def test_bf16_mixed_clips_gradients_with_fused_adamw(tmp_path: Path) -> None:
    norms = train_clipped(tmp_path, "cpu")
    assert norms.fused == [True] * len(norms.norms) and norms.norms
    assert max(norms.norms) <= CLIP * 1.01


def test_fp16_mixed_unscales_before_it_clips_with_fused_adamw(tmp_path: Path) -> None:
    """The GradScaler multiplies the loss by 65,536: a clip of the scaled gradients would leave
    norms far above `CLIP`, and a second unscaling in the fused step would shrink them again."""
    norms = train_clipped(tmp_path, "cpu", "16-mixed")
    assert norms.fused == [True] * len(norms.norms) and norms.norms
    assert CLIP * 0.5 <= max(norms.norms) <= CLIP * 1.01


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_the_same_mixed_step_runs_on_cuda(tmp_path: Path, precision: str) -> None:
    """The GPU path is the CPU path: autocast, SDPA, fused AdamW, clipping (gpu_check.sh)."""
    norms = train_clipped(tmp_path, "gpu", precision)
    assert norms.fused == [True] * len(norms.norms) and norms.norms
    assert max(norms.norms) <= CLIP * 1.01
