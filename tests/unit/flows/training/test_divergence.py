"""Never publish a wrong model: a run that diverges stops with its step and the value seen,
publishes nothing, and keeps only checkpoints whose values are finite; a rerun never resumes
into a checkpoint whose values are not."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import Logger
from torch.utils.data import DataLoader, TensorDataset

from flows.core.artifacts import ArtifactStore, file_sha256
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import LAST_CHECKPOINT, pretrain
from flows.stages.training_types import PretrainSettings
from flows.training.divergence_report import remedy
from flows.training.settings import TrainerSettings
from flows.training.training_checkpoints import checksum_file
from lightning_modules.divergence import DivergenceGuard, TrainingDiverged
from tests.fakes import TINY_ENCODER, WordShards, on_this_machine

DIVERGING = on_this_machine(
    TrainerSettings(
        max_steps=30,
        warmup_steps=1,
        batch_size=8,
        learning_rate=1000,
        val_every_steps=30,
        checkpoint_every_steps=1,
        log_every_steps=10,
        threads=1,
    )
)


def published(root: Path) -> list[Path]:
    return [entry for entry in root.glob("*/*") if not entry.name.startswith(".")]


def all_finite(checkpoint: Path) -> bool:
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    return all(bool(torch.isfinite(tensor).all()) for tensor in state.values())


def test_a_diverging_run_stops_names_the_step_and_the_setting_and_publishes_nothing(
    tmp_path: Path, word_shards: WordShards
) -> None:
    store = ArtifactStore(tmp_path / "store")
    settings = PretrainSettings(TINY_ENCODER, ObjectiveSettings(), DIVERGING, 0)
    with pytest.raises(
        TrainingDiverged,
        match=r"^pretrain diverged at step (\d+) of 30: the (gradient norm|training loss) is "
        r"(nan|inf)\. Nothing was published; the checkpoints saved before it stay in "
        r".*/\.work-\w+/checkpoints and the same command resumes from the last one with finite "
        r"weights\. If it diverges again: lower trainer\.learning_rate=1000: AdamW trains a "
        r"transformer at 1e-5 to 5e-3 \(a new key: trained afresh\)\.$",
    ) as stopped:
        pretrain(settings, word_shards.shards, word_shards.tokenizer, store)
    step = int(str(stopped.value).split("at step ")[1].split()[0])
    assert step < 30  # stopped, not run to the end on NaN
    assert published(tmp_path / "store") == []
    [checkpoint] = (tmp_path / "store").glob(f"pretrain/.work-*/checkpoints/{LAST_CHECKPOINT}")
    assert all_finite(checkpoint)
    assert torch.load(checkpoint, weights_only=True)["global_step"] == step - 1

    fixed = replace(settings, trainer=DIVERGING.model_copy(update={"learning_rate": 1e-3}))
    ref = pretrain(fixed, word_shards.shards, word_shards.tokenizer, store)
    assert not ref.cache_hit and not ref.outputs["resumed"]  # another key: nothing reused
    assert math.isfinite(ref.outputs["val_loss"])


@pytest.mark.parametrize(
    ("update", "named"),
    [
        ({"learning_rate": 5.0}, "lower trainer.learning_rate=5: AdamW"),
        ({"learning_rate": 2e-3, "grad_clip": 0}, "set trainer.grad_clip=1.0 (clipping is off)"),
        ({"learning_rate": 2e-3, "warmup_steps": 0}, "warm up (trainer.warmup_steps=0;"),
        ({"learning_rate": 2e-3, "warmup_steps": 100}, "lower trainer.learning_rate=0.002, or "),
    ],
)
def test_the_remedy_names_the_setting_to_change_first(update: dict, named: str) -> None:
    assert named in remedy(TrainerSettings(**update))


class StopAtStep(Logger):
    """The injected fault: the run dies at `step`, as a kill would end it, after its checkpoints
    of the steps before."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    @property
    def name(self) -> str:
        return "stop"

    @property
    def version(self) -> str:
        return "0"

    def log_hyperparams(self, params: object, *args: object, **kwargs: object) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if step is not None and step >= self.step:  # metrics carry the steps done (MetricSteps)
            raise RuntimeError(f"killed at step {self.step}")


def killed_at_step_6(
    tmp_path: Path, word_shards: WordShards
) -> tuple[ArtifactStore, PretrainSettings, Path]:
    """A pretraining killed after its step-6 log line: the store, its settings, `last.ckpt`."""
    store = ArtifactStore(tmp_path / "store")
    trainer = DIVERGING.model_copy(update={"learning_rate": 1e-3, "log_every_steps": 1})
    settings = PretrainSettings(TINY_ENCODER, ObjectiveSettings(), trainer, 0)
    with pytest.raises(RuntimeError, match="killed at step 6"):
        pretrain(settings, word_shards.shards, word_shards.tokenizer, store, [StopAtStep(6)])
    [last] = (tmp_path / "store").glob(f"pretrain/.work-*/checkpoints/{LAST_CHECKPOINT}")
    return store, settings, last


def overwrite_with_nan(checkpoint: Path) -> None:
    """Every floating weight of `checkpoint` NaN, saved over it (its checksum file untouched)."""
    saved = torch.load(checkpoint, weights_only=True)
    for tensor in saved["state_dict"].values():
        if tensor.is_floating_point():
            tensor.fill_(math.nan)  # in place: tied weights keep sharing one storage
    with checkpoint.open("wb") as handle:
        torch.save(saved, handle)


def test_a_checkpoint_overwritten_with_nan_bytes_is_not_resumed_from(
    tmp_path: Path, word_shards: WordShards, caplog: pytest.LogCaptureFixture
) -> None:
    store, settings, last = killed_at_step_6(tmp_path, word_shards)
    size = last.stat().st_size
    overwrite_with_nan(last)
    assert last.stat().st_size == size  # the same size, and it loads: only its checksum differs
    with caplog.at_level(logging.WARNING, logger="flows.training.training_checkpoints"):
        ref = pretrain(settings, word_shards.shards, word_shards.tokenizer, store)
    assert f"checkpoint {last} does not match its checksum" in caplog.text
    assert ref.outputs["resumed"] and math.isfinite(ref.outputs["val_loss"])


def test_a_checkpoint_with_nan_weights_and_a_valid_checksum_is_set_aside_not_resumed_into(
    tmp_path: Path, word_shards: WordShards, caplog: pytest.LogCaptureFixture
) -> None:
    """The stuck rerun: NaN weights whose checksum matches resumed into the same divergence on
    every run of the same command."""
    store, settings, last = killed_at_step_6(tmp_path, word_shards)
    overwrite_with_nan(last)
    checksum_file(last).write_text(file_sha256(last))  # the bytes now match their checksum
    with caplog.at_level(logging.INFO, logger="flows.training.training_checkpoints"):
        ref = pretrain(settings, word_shards.shards, word_shards.tokenizer, store)
    assert f"checkpoint {last} holds non-finite values (" in caplog.text
    # Kept beside the others until the stage publishes (its work dir then goes).
    assert f"set aside as {last}.diverged-" in caplog.text
    assert f"resuming from {last}.previous (step 5)" in caplog.text  # the last finite one
    assert ref.outputs["resumed"] and math.isfinite(ref.outputs["val_loss"])


class Exploding(pl.LightningModule):
    """Linear regression under SGD at a learning rate of 1e6: inf within a few steps."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
        inputs, targets = batch
        return ((self.layer(inputs) - targets) ** 2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e6)


def diverge(tmp_path: Path, guard: DivergenceGuard) -> tuple[int, int]:
    """Trains `Exploding` with a checkpoint after every step; the step the guard names, and the
    step of the last checkpoint written."""
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=generator), torch.randn(64, 1))
    checkpoints = ModelCheckpoint(tmp_path, save_last=True, save_top_k=0, every_n_train_steps=1)
    trainer = pl.Trainer(
        max_steps=40,
        callbacks=[guard, checkpoints],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    pl.seed_everything(0, verbose=False)
    with pytest.raises(TrainingDiverged, match=r"^test diverged at step (\d+) of 40") as stopped:
        trainer.fit(Exploding(), DataLoader(data, batch_size=8))
    step = int(str(stopped.value).split("at step ")[1].split()[0])
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert all(bool(torch.isfinite(t).all()) for t in saved["state_dict"].values())
    return step, saved["global_step"]


def test_read_late_the_record_still_names_the_first_step_and_nothing_after_it_is_saved(
    tmp_path: Path,
) -> None:
    """On an accelerator the guard reads its record every 10 steps and before each save (not
    every step); it must still name the first bad step, and no checkpoint may follow it."""
    at_once = diverge(tmp_path / "a", DivergenceGuard("test", "advice", immediate=True))
    deferred = DivergenceGuard("test", "advice", immediate=False, check_every_steps=10)
    assert diverge(tmp_path / "b", deferred) == at_once
    step, saved = at_once
    assert 1 < step < 40 and saved == step - 1
