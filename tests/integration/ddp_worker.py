"""Single-process pretraining that dies hard right after a checkpoint, for the DDP resume test.

The fault is injected, not timed: the process exits (as SIGKILL would leave it) just after the
checkpoint of step `kill_at` is on disk, so the test never races a kill against training.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

from flows.core.artifacts import ArtifactStore
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import pretrain
from flows.stages.training_types import PretrainSettings
from tests.integration import pretrain_worker

# No dropout: each rank draws dropout for its own rows, so only then are the runs comparable.
MODEL = {**pretrain_worker.MODEL, "dropout": 0.0, "attention_dropout": 0.0}
TRAINER = pretrain_worker.TRAINER.model_copy(
    update=dict(max_steps=24, checkpoint_every_steps=12, log_every_steps=1)
)
DDP = TRAINER.model_copy(update=dict(strategy="ddp", devices=2))
KILLED = 137


def settings(trainer: Any) -> PretrainSettings:
    return PretrainSettings(MODEL, ObjectiveSettings(), trainer, seed=3)


def train_until_killed(store_root: Path, kill_at: int) -> None:
    save = ModelCheckpoint.on_train_batch_end

    def save_then_die(self: ModelCheckpoint, trainer: pl.Trainer, *args: Any) -> None:
        save(self, trainer, *args)
        if trainer.global_step == kill_at:
            os._exit(KILLED)

    ModelCheckpoint.on_train_batch_end = save_then_die  # type: ignore[method-assign]
    store = ArtifactStore(store_root)
    tokenizer, shards = (
        store.lookup(stage, only_key(store_root / stage)) for stage in ("tokenizer", "shards")
    )
    assert tokenizer is not None and shards is not None
    pretrain(settings(TRAINER), shards, tokenizer, store)


def only_key(stage_dir: Path) -> str:
    """The one artifact of a stage; for the tokenizer, its content key (the input key is a link)."""
    (published,) = [
        path.name
        for path in stage_dir.iterdir()
        if not path.name.startswith(".") and not path.is_symlink()
    ]
    return published


if __name__ == "__main__":
    train_until_killed(Path(sys.argv[1]), int(sys.argv[2]))
