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
from flows.stages.objectives import ObjectiveSettings, make_collator
from flows.stages.tokenizer import TOKENIZER_FILE, TrainedTokenizer, load_tokenizer
from flows.stages.training import TrainerSettings, encoder_config, make_trainer
from lightning_modules.callbacks import ProgressLog
from lightning_modules.data.mlm_datamodule import MaskedLMDataModule
from lightning_modules.data.shard_format import ShardIndex
from lightning_modules.electra import ReplacedTokenDetectionModule
from lightning_modules.export import export_huggingface
from lightning_modules.flops import electra_training_flops_per_token, mlm_training_flops_per_token
from lightning_modules.mlm import MaskedLanguageModelingModule, ThroughputSettings
from lightning_modules.models.electra import ElectraForPreTraining
from lightning_modules.models.encoder import EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.models.serialization import count_parameters, save_electra, save_masked_lm
from lightning_modules.optim import OptimizerSettings

# TrainingStreamState makes mid-epoch resume exact; Lightning cannot see that and warns anyway.
warnings.filterwarnings("ignore", message=r".*resuming from a checkpoint that ended before")

STAGE = "pretrain"
VERSION = 2  # 2: objective family (selection, static masks, ELECTRA)
LAST_CHECKPOINT = "last.ckpt"
HUGGINGFACE_DIR = "huggingface"  # loadable with transformers' from_pretrained (post-LN models)


@dataclass(frozen=True)
class PretrainSettings:
    model: dict[str, Any]
    objective: ObjectiveSettings
    trainer: TrainerSettings
    seed: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> PretrainSettings:
        settings = cls(
            dict(config["model"]),
            settings_from(ObjectiveSettings, config["objective"], "objective"),
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
            "objective": output_settings(settings.objective, exclude=("name",)),
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
        check_shards_match(shards_ref, tokenizer_ref)
        objective = settings.objective
        trainer_settings = settings.trainer
        data = MaskedLMDataModule(
            shards_ref.path,
            make_collator(objective, trained, settings.seed),
            trainer_settings.batch_size,
            settings.seed,
            trainer_settings.num_workers,
            trainer_settings.max_validation_sequences,
            objective.static_copies if objective.masking == "static" else None,
        )
        total_steps = trainer_settings.total_steps(data.index.seq_len)
        model, module = build_module(
            settings,
            encoder_config(settings.model, trained.vocab_size, trained.special.pad),
            data.index.seq_len,
            total_steps,
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
        # weights_only: a checkpoint is data, never code, even if someone swapped the file.
        trainer.fit(
            module,
            datamodule=data,
            ckpt_path=str(resume_from) if resumed else None,
            weights_only=True,
        )
        fit_seconds = time.perf_counter() - started
        final = trainer.validate(module, datamodule=data, verbose=False)[0]
        exported = save_and_export(model, trained, tokenizer_ref.path / TOKENIZER_FILE, directory)
        trained_tokens = (
            trainer.global_step
            * trainer_settings.batch_size
            * trainer_settings.accumulate_grad_batches
            * data.index.seq_len
        )
        return {
            "initial_val_loss": initial,
            **{name.replace("/", "_"): value for name, value in final.items()},
            "steps": trainer.global_step,
            "train_tokens": trained_tokens,
            "fit_seconds": fit_seconds,
            "parameters": count_parameters(model),
            "resumed": resumed,
            "huggingface_export": exported,
        }

    return store.get_or_build(STAGE, key, build, record)


def check_shards_match(shards_ref: ArtifactRef, tokenizer_ref: ArtifactRef) -> None:
    """Token ids only mean something under the tokenizer that wrote them."""
    built_with = ShardIndex.load(shards_ref.path).tokenizer_key
    if built_with != tokenizer_ref.key:
        raise ValueError(
            f"the shards in {shards_ref.path} were written by tokenizer {built_with}, not by "
            f"{tokenizer_ref.key} ({tokenizer_ref.path}); rebuild the shards with this "
            "tokenizer (the pipeline does so when both come from the same run)"
        )


def build_module(
    settings: PretrainSettings, config: EncoderConfig, seq_len: int, total_steps: int
) -> tuple[BertForMaskedLM | ElectraForPreTraining, pl.LightningModule]:
    """The network and its LightningModule for the objective's kind (MLM or ELECTRA)."""
    trainer = settings.trainer
    objective = settings.objective
    optimizer = OptimizerSettings(
        learning_rate=trainer.learning_rate,
        weight_decay=trainer.weight_decay,
        warmup_steps=trainer.warmup_steps,
        total_steps=total_steps,
        schedule=trainer.schedule,
        beta2=trainer.beta2,
    )
    if objective.kind == "electra":
        electra = ElectraForPreTraining(config, objective.electra)
        if trainer.compile:
            electra.discriminator.compile()
        flops = electra_training_flops_per_token(
            config, objective.electra, seq_len, objective.mask_rate
        )
        throughput = ThroughputSettings(trainer.log_every_steps, flops, trainer.peak_flops)
        return electra, ReplacedTokenDetectionModule(
            electra, optimizer, throughput, validation_seed=settings.seed
        )
    model = BertForMaskedLM(config)
    if trainer.compile:
        model.encoder.compile()  # in place: parameter names, checkpoints and export unchanged
    flops = mlm_training_flops_per_token(config, seq_len, objective.mask_rate)
    throughput = ThroughputSettings(trainer.log_every_steps, flops, trainer.peak_flops)
    return model, MaskedLanguageModelingModule(model, optimizer, throughput)


def save_and_export(
    model: BertForMaskedLM | ElectraForPreTraining,
    trained: TrainedTokenizer,
    tokenizer_file: Path,
    directory: Path,
) -> bool:
    """Saves the weights; exports for transformers when the architecture has an equivalent."""
    if isinstance(model, ElectraForPreTraining):
        save_electra(model, directory)
    else:
        save_masked_lm(model, directory)
    if model.config.norm_placement != "post":
        return False
    export_huggingface(
        model,
        tokenizer_file,
        trained.settings.special_tokens,
        trained.settings.kind,
        trained.settings.lowercase,
        directory / HUGGINGFACE_DIR,
    )
    return True


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
