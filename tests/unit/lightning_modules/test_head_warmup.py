"""A checkpoint without an MLM head: its new head trains alone first (the encoder, and the word
table the decoder is tied to, take no step at all), then the whole model continues; the
encoder's distance from the weights it started from is logged as `train/cosine_to_base`, and the
validation at the warm-up's end is what the run's learning and forgetting are measured from."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import pytorch_lightning as pl
import torch

from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.optim import learning_rate_factor
from lightning_modules.optim_settings import OptimizerSettings
from tests.fakes import quiet_trainer
from tests.unit.lightning_modules.mlm_batches import (
    HEAD_ONLY,
    TOTAL,
    batches,
    loader,
    warmup_module,
)


class ModelAt(pl.Callback):
    """A copy of the whole model (encoder and head) as the optimizer step `step` begins."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.model: BertForMaskedLM | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, module: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            self.model = copy.deepcopy(module.model)


class EncoderAt(pl.Callback):
    """The encoder's weights after a given optimizer step."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.state: dict[str, torch.Tensor] = {}

    def on_train_batch_end(self, trainer: pl.Trainer, module: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            self.state = copy.deepcopy(module.model.encoder.state_dict())


def test_the_head_trains_alone_then_the_whole_model_and_the_drift_is_logged() -> None:
    module = warmup_module()
    model = module.model
    base = copy.deepcopy(model.encoder)
    head = copy.deepcopy(model.head.state_dict())
    module.track_drift_from(copy.deepcopy(base))
    after_warmup = EncoderAt(HEAD_ONLY)
    run = quiet_trainer(TOTAL, after_warmup)
    run.fit(module, loader(batches(TOTAL, 0)))

    for name, tensor in base.state_dict().items():  # not even weight decay moved it
        assert torch.equal(after_warmup.state[name], tensor), name
    assert not torch.equal(model.head.transform.weight, head["transform.weight"])
    assert model.head.word_embeddings is model.encoder.embeddings.word  # still tied
    start = base.state_dict()
    moved = [
        name for name, t in model.encoder.state_dict().items() if not torch.equal(t, start[name])
    ]
    assert len(moved) == len(start), "the whole model continues after the warm-up"

    cosine = run.validate(module, loader(batches(2, 1)), verbose=False)[0]["train/cosine_to_base"]
    assert 0.0 < cosine < 1.0
    module.model.encoder.load_state_dict(base.state_dict())
    cosine = run.validate(module, loader(batches(2, 1)), verbose=False)[0]["train/cosine_to_base"]
    assert cosine == pytest.approx(1.0, abs=1e-6)  # the base itself: no drift


def test_the_head_phase_runs_at_its_own_rate_and_the_schedule_follows_it() -> None:
    settings = OptimizerSettings(
        learning_rate=1e-4, total_steps=110, warmup_steps=10, head_only_steps=50
    )
    factors = [learning_rate_factor(step, settings) for step in range(110)]
    assert factors[:50] == [pytest.approx(10.0)] * 50  # 1e-3, constant
    assert factors[50] == pytest.approx(0.1) and factors[59] == pytest.approx(1.0)  # warmup
    assert factors[60] == pytest.approx(1.0) and factors[109] == pytest.approx(1 / 50)  # decay


def test_the_validation_at_the_warmup_end_scores_the_base_encoder_under_its_fitted_head() -> None:
    """Step 0's fresh head scores chance, so a change from it would read as a gain: the "before"
    is the validation as the encoder's first step begins, taken there although Lightning's loop
    validates only every `val_check_interval` steps (here: never before the end)."""
    module = warmup_module()
    validation = loader(batches(2, 1))
    at_warmup_end = ModelAt(HEAD_ONLY)
    run = quiet_trainer(TOTAL, at_warmup_end)
    run.fit(module, loader(batches(TOTAL, 0)), validation)

    assert isinstance(at_warmup_end.model, BertForMaskedLM)
    before = warmup_module()
    before.model = at_warmup_end.model
    expected = run.validate(before, validation, verbose=False)[0]
    assert set(module.head_warmup_validation) == {"val/loss", "val/accuracy", "val/perplexity"}
    for name, value in module.head_warmup_validation.items():
        assert value == pytest.approx(expected[name]), name
    final = run.validate(module, validation, verbose=False)[0]["val/loss"]
    assert final != pytest.approx(module.head_warmup_validation["val/loss"])  # the run moved on


def test_the_warmup_end_validation_survives_a_resume() -> None:
    module = warmup_module()
    module.head_warmup_validation = {"val/loss": 4.2}
    checkpoint: dict[str, object] = {}
    module.on_save_checkpoint(checkpoint)
    resumed = warmup_module()
    resumed.on_load_checkpoint(checkpoint)
    assert resumed.head_warmup_validation == {"val/loss": 4.2}
