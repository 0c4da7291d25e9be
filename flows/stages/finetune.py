"""Stage 4: fine-tune from the pretrained encoder and from random init with one recipe.

Both arms share the seed, data order, head initialisation and budget; the only difference is the
encoder's starting weights, so their score difference is what pretraining bought (the lift).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import Logger
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from flows.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.corpora.pydoc_topics_task import LabelledText, load_pydoc_topics
from flows.settings import ConfigError, output_settings, settings_from
from flows.stages.tokenizer import load_tokenizer
from flows.stages.training import TrainerSettings, make_trainer
from lightning_modules.callbacks import ProgressLog
from lightning_modules.classifier import SequenceClassificationModule, predict_labels
from lightning_modules.metrics import accuracy, macro_f1
from lightning_modules.models.heads import BertForSequenceClassification
from lightning_modules.models.serialization import load_encoder_config, load_encoder_weights
from lightning_modules.optim import OptimizerSettings

STAGE = "finetune"
VERSION = 1
TASKS = ("pydoc_topics",)
ARMS = ("pretrained", "random_init")
LoggerFactory = Callable[[str], Sequence[Logger]]


@dataclass(frozen=True)
class FinetuneSettings:
    """`finetune.*`: the downstream task and the one recipe both arms use."""

    task: str = "pydoc_topics"
    max_length: int = 128
    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 3e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    classifier_dropout: float = 0.1
    min_words: int = 5
    max_train_examples: int | None = None
    log_every_steps: int = 20

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ConfigError(f"finetune.task={self.task!r} must be one of {TASKS}")
        if self.epochs < 1 or self.batch_size < 1 or self.max_length < 8:
            raise ConfigError(
                "finetune.epochs and finetune.batch_size must be >= 1, finetune.max_length >= 8"
            )
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"finetune.warmup_ratio={self.warmup_ratio} must be in [0, 1)")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> FinetuneSettings:
        return settings_from(cls, config["finetune"], "finetune")


class EncodedExamples(torch.utils.data.Dataset[tuple[list[int], int]]):
    def __init__(self, tokenizer: Tokenizer, examples: list[LabelledText]) -> None:
        encodings = tokenizer.encode_batch([example.text for example in examples])
        self.items = [
            (encoding.ids, example.label)
            for encoding, example in zip(encodings, examples, strict=True)
        ]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, position: int) -> tuple[list[int], int]:
        return self.items[position]


def pad_batch(items: list[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(ids) for ids, _ in items)
    input_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    for row, (ids, _) in enumerate(items):
        input_ids[row, : len(ids)] = torch.tensor(ids)
    return {
        "input_ids": input_ids,
        "attention_mask": input_ids != pad_id,
        "labels": torch.tensor([label for _, label in items]),
    }


def finetune(
    settings: FinetuneSettings,
    seed: int,
    trainer_settings: TrainerSettings,
    pretrain_ref: ArtifactRef,
    tokenizer_ref: ArtifactRef,
    store: ArtifactStore,
    loggers_for: LoggerFactory = lambda arm: (),
) -> ArtifactRef:
    record: dict[str, Any] = {
        "settings": {
            **output_settings(settings, exclude=("log_every_steps",)),
            "seed": seed,
            "precision": trainer_settings.precision,
            "grad_clip": trainer_settings.grad_clip,
        },
        "inputs": {"pretrain": pretrain_ref.key, "tokenizer": tokenizer_ref.key},
    }
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])

    def build(directory: Path) -> dict[str, Any]:
        trained = load_tokenizer(tokenizer_ref)
        trained.tokenizer.enable_truncation(settings.max_length)
        data = load_pydoc_topics(settings.min_words, settings.max_train_examples, seed)
        splits = {
            name: EncodedExamples(trained.tokenizer, examples)
            for name, examples in data.splits.items()
        }
        for name, split in splits.items():
            if len(split) == 0:
                raise ValueError(f"finetune task {settings.task}: the {name} split is empty")
        outputs: dict[str, Any] = {
            "labels": list(data.labels),
            **{f"{name}_examples": len(s) for name, s in splits.items()},
        }
        for arm in ARMS:
            scores = train_and_score(
                arm,
                settings,
                seed,
                trainer_settings,
                pretrain_ref.path,
                splits,
                trained.special.pad,
                len(data.labels),
                directory,
                loggers_for,
            )
            outputs.update({f"{arm}_{metric}": value for metric, value in scores.items()})
        for metric in ("accuracy", "macro_f1"):
            outputs[f"lift_{metric}"] = (
                outputs[f"pretrained_{metric}"] - outputs[f"random_init_{metric}"]
            )
        return outputs

    return store.get_or_build(STAGE, key, build, record)


def train_and_score(
    arm: str,
    settings: FinetuneSettings,
    seed: int,
    trainer_settings: TrainerSettings,
    pretrained_dir: Path,
    splits: dict[str, EncodedExamples],
    pad_id: int,
    num_labels: int,
    work_dir: Path,
    loggers_for: LoggerFactory,
) -> dict[str, float]:
    pl.seed_everything(seed, workers=True, verbose=False)
    model = BertForSequenceClassification(
        load_encoder_config(pretrained_dir), num_labels, settings.classifier_dropout
    )
    if arm == "pretrained":
        load_encoder_weights(model.encoder, pretrained_dir)

    def loader(split: str, shuffle: bool) -> DataLoader:
        return DataLoader(
            splits[split],
            batch_size=settings.batch_size,
            shuffle=shuffle,
            collate_fn=lambda items: pad_batch(items, pad_id),
            generator=torch.Generator().manual_seed(seed),
        )

    steps = settings.epochs * -(-len(splits["train"]) // settings.batch_size)
    module = SequenceClassificationModule(
        model,
        OptimizerSettings(
            learning_rate=settings.learning_rate,
            weight_decay=settings.weight_decay,
            warmup_steps=int(settings.warmup_ratio * steps),
            total_steps=steps,
        ),
    )
    runtime = replace(trainer_settings, accumulate_grad_batches=1)
    trainer = make_trainer(
        runtime,
        work_dir / arm,
        loggers_for(arm),
        [ProgressLog(settings.log_every_steps, f"{STAGE}/{arm}")],
        max_epochs=settings.epochs,
        enable_checkpointing=False,
    )
    trainer.fit(module, train_dataloaders=loader("train", shuffle=True))
    predictions, labels = predict_labels(model, loader("test", shuffle=False))
    return {
        "accuracy": accuracy(predictions, labels),
        "macro_f1": macro_f1(predictions, labels, num_labels),
    }
