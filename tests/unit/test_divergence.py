"""Never publish a wrong model: a run that diverges stops with its step and its likely cause,
publishes nothing, and keeps only checkpoints whose values are finite."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from pytorch_lightning.loggers import Logger

from flows.core.artifacts import ArtifactStore
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import LAST_CHECKPOINT, PretrainSettings, pretrain
from flows.training.divergence import likely_cause
from flows.training.settings import TrainerSettings
from lightning_modules.divergence import TrainingDiverged
from tests.fakes import TINY_ENCODER, WordShards

DIVERGING = TrainerSettings(
    max_steps=30,
    warmup_steps=1,
    batch_size=8,
    learning_rate=1000,
    val_every_steps=30,
    checkpoint_every_steps=1,
    log_every_steps=10,
    threads=1,
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
        r"(nan|inf)\. Most likely trainer\.learning_rate=1000, far above what trains a "
        r"transformer with AdamW \(1e-5 to 5e-3\): lower it\. Nothing was published; any "
        r"checkpoint saved before it stays in .*/\.work-\w+/checkpoints, and a rerun with the "
        r"setting changed trains under a new key\.$",
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
        ({"learning_rate": 5.0}, "trainer.learning_rate=5, far above"),
        ({"learning_rate": 2e-3, "grad_clip": 0}, "trainer.grad_clip=0, which turns gradient"),
        ({"learning_rate": 2e-3, "warmup_steps": 0}, "trainer.warmup_steps=0: warm up"),
        ({"learning_rate": 2e-3, "warmup_steps": 100}, "Most likely trainer.learning_rate=0.002: "),
    ],
)
def test_the_likely_cause_names_the_first_suspect(update: dict, named: str) -> None:
    assert named in likely_cause(TrainerSettings(**update))


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
        if step is not None and step + 1 >= self.step:
            raise RuntimeError(f"killed at step {self.step}")


def test_a_checkpoint_overwritten_with_nan_bytes_is_not_resumed_from(
    tmp_path: Path, word_shards: WordShards, caplog: pytest.LogCaptureFixture
) -> None:
    store = ArtifactStore(tmp_path / "store")
    trainer = DIVERGING.model_copy(update={"learning_rate": 1e-3, "log_every_steps": 1})
    settings = PretrainSettings(TINY_ENCODER, ObjectiveSettings(), trainer, 0)
    with pytest.raises(RuntimeError, match="killed at step 6"):
        pretrain(settings, word_shards.shards, word_shards.tokenizer, store, [StopAtStep(6)])
    [last] = (tmp_path / "store").glob(f"pretrain/.work-*/checkpoints/{LAST_CHECKPOINT}")
    size, saved = last.stat().st_size, torch.load(last, weights_only=True)
    for tensor in saved["state_dict"].values():
        if tensor.is_floating_point():
            tensor.fill_(math.nan)  # in place: tied weights keep sharing one storage
    with last.open("wb") as handle:
        torch.save(saved, handle)
    assert last.stat().st_size == size  # the same size, and it loads: only its checksum differs
    with caplog.at_level(logging.WARNING, logger="flows.training.checkpoints"):
        ref = pretrain(settings, word_shards.shards, word_shards.tokenizer, store)
    assert f"checkpoint {last} does not match its checksum" in caplog.text
    assert ref.outputs["resumed"] and math.isfinite(ref.outputs["val_loss"])
