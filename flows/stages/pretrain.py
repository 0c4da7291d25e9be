"""Stage 3: masked-language-model pretraining with Lightning, resumable from its last checkpoint."""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import Logger

from flows.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.settings import output_settings, settings_from
from flows.stages.tokenizer import TOKENIZER_FILE, load_tokenizer
from flows.stages.training import TrainerSettings, encoder_config, make_trainer
from lightning_modules.callbacks import ProgressLog
from lightning_modules.data.collator import MaskingCollator, MaskingRule
from lightning_modules.data.mlm_datamodule import MaskedLMDataModule
from lightning_modules.export import export_masked_lm
from lightning_modules.flops import mlm_training_flops_per_token
from lightning_modules.mlm import MaskedLanguageModelingModule, ThroughputSettings
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.models.serialization import count_parameters, save_masked_lm
from lightning_modules.optim import OptimizerSettings

# TrainingStreamState makes mid-epoch resume exact; Lightning cannot see that and warns anyway.
warnings.filterwarnings("ignore", message=r".*resuming from a checkpoint that ended before")

STAGE = "pretrain"
VERSION = 1
LAST_CHECKPOINT = "last.ckpt"
HUGGINGFACE_DIR = "huggingface"  # loadable with transformers' from_pretrained (post-LN models)


@dataclass(frozen=True)
class PretrainSettings:
    model: dict[str, Any]
    objective: MaskingRule
    trainer: TrainerSettings
    seed: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> PretrainSettings:
        objective = {k: v for k, v in config["objective"].items() if k != "name"}
        settings = cls(
            dict(config["model"]),
            settings_from(MaskingRule, objective, "objective"),
            settings_from(TrainerSettings, config["trainer"], "trainer"),
            int(config["seed"]),
        )
        # Validate the model shape now, with the configured vocabulary as a stand-in, so a bad
        # `model.*` value fails before the tokenizer and shards stages spend any time.
        encoder_config(settings.model, int(config["tokenizer"]["vocab_size"]), 0)
        return settings


def pretrain(
    settings: PretrainSettings,
    shards_ref: ArtifactRef,
    tokenizer_ref: ArtifactRef,
    store: ArtifactStore,
    loggers: Sequence[Logger] = (),
) -> ArtifactRef:
    record: dict[str, Any] = {
        "settings": {
            "model": settings.model,
            "objective": output_settings(settings.objective),
            "trainer": output_settings(settings.trainer, TrainerSettings.NOT_IN_KEY),
            "seed": settings.seed,
        },
        "inputs": {"shards": shards_ref.key, "tokenizer": tokenizer_ref.key},
    }
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])
    work_dir = store.work_dir(STAGE, key)

    def build(directory: Path) -> dict[str, Any]:
        pl.seed_everything(settings.seed, workers=True, verbose=False)
        trained = load_tokenizer(tokenizer_ref)
        model = BertForMaskedLM(
            encoder_config(settings.model, trained.vocab_size, trained.special.pad)
        )
        collator = MaskingCollator(
            settings.objective,
            trained.vocab_size,
            trained.special.mask,
            trained.special.all(),
            settings.seed,
        )
        trainer_settings = settings.trainer
        if trainer_settings.compile:
            model.encoder.compile()  # in place: parameter names, checkpoints and export unchanged
        data = MaskedLMDataModule(
            shards_ref.path,
            collator,
            trainer_settings.batch_size,
            settings.seed,
            trainer_settings.num_workers,
            trainer_settings.max_validation_sequences,
        )
        total_steps = trainer_settings.total_steps(data.index.seq_len)
        module = MaskedLanguageModelingModule(
            model,
            OptimizerSettings(
                learning_rate=trainer_settings.learning_rate,
                weight_decay=trainer_settings.weight_decay,
                warmup_steps=trainer_settings.warmup_steps,
                total_steps=total_steps,
                schedule=trainer_settings.schedule,
                beta2=trainer_settings.beta2,
            ),
            ThroughputSettings(
                trainer_settings.log_every_steps,
                mlm_training_flops_per_token(
                    model.config, data.index.seq_len, settings.objective.mask_rate
                ),
                trainer_settings.peak_flops,
            ),
        )
        checkpoints = ModelCheckpoint(
            dirpath=work_dir / "checkpoints",
            save_last=True,
            save_top_k=0,
            every_n_train_steps=trainer_settings.checkpoint_every_steps,
        )
        trainer = make_trainer(
            trainer_settings,
            work_dir,
            loggers,
            [data.stream_state, checkpoints, ProgressLog(trainer_settings.log_every_steps, STAGE)],
            max_steps=total_steps,
            val_check_interval=trainer_settings.val_every_steps,
            check_val_every_n_epoch=None,
        )
        initial = initial_validation(trainer, module, data, work_dir)
        resume_from = work_dir / "checkpoints" / LAST_CHECKPOINT
        resumed = resume_from.is_file()
        started = time.perf_counter()
        trainer.fit(module, datamodule=data, ckpt_path=str(resume_from) if resumed else None)
        fit_seconds = time.perf_counter() - started
        final = trainer.validate(module, datamodule=data, verbose=False)[0]
        save_masked_lm(model, directory)
        exported = model.config.norm_placement == "post"
        if exported:
            export_masked_lm(
                model,
                tokenizer_ref.path / TOKENIZER_FILE,
                trained.settings.special_tokens,
                trained.settings.kind,
                trained.settings.lowercase,
                directory / HUGGINGFACE_DIR,
            )
        trained_tokens = (
            trainer.global_step
            * trainer_settings.batch_size
            * trainer_settings.accumulate_grad_batches
            * data.index.seq_len
        )
        return {
            "initial_val_loss": initial,
            "val_loss": final["val/loss"],
            "val_accuracy": final["val/accuracy"],
            "val_perplexity": final["val/perplexity"],
            "steps": trainer.global_step,
            "train_tokens": trained_tokens,
            "fit_seconds": fit_seconds,
            "parameters": count_parameters(model),
            "resumed": resumed,
            "huggingface_export": exported,
        }

    return store.get_or_build(STAGE, key, build, record)


def initial_validation(
    trainer: pl.Trainer, module: pl.LightningModule, data: MaskedLMDataModule, work_dir: Path
) -> float:
    """Validation loss of the untrained model, kept across resumes as the 'before' of the curve."""
    saved = work_dir / "initial_validation.json"
    if saved.is_file():
        return float(json.loads(saved.read_text())["val_loss"])
    loss = float(trainer.validate(module, datamodule=data, verbose=False)[0]["val/loss"])
    work_dir.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps({"val_loss": loss}))
    return loss
