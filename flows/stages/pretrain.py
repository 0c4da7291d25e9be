"""Stage 3: masked-language-model pretraining with Lightning, resumable from its last checkpoint."""

from __future__ import annotations

import copy
import json
import shutil
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import Logger

from flows.core.artifacts import (
    ArtifactRef,
    ArtifactStore,
    replace_json,
    stage_key,
)
from flows.core.settings import output_settings
from flows.corpora.formats import CorpusInputError
from flows.stages.collators import make_collator
from flows.stages.forgetting import general_change_interval, initial_rows, save_initial_rows
from flows.stages.init_point import LINEAGE_FILE, SCRATCH, InitPoint
from flows.stages.init_source import HUGGINGFACE_DIR
from flows.stages.init_weights import (
    check_loadable,
    check_same_tokenizer,
    load_initial_weights,
    run_encoder_config,
)
from flows.stages.public_import import export_as_base_class
from flows.stages.shards.validation_rows import build_validation_rows
from flows.stages.tokenizer import TOKENIZER_FILE, TrainedTokenizer, load_tokenizer
from flows.stages.training_types import GENERAL_VALIDATION_KEY, PretrainOutputs, PretrainSettings
from flows.training.divergence_report import divergence_guard
from flows.training.launch import broadcast_from_rank_zero, build_on_ranks, is_rank_zero
from flows.training.settings import TrainerSettings, model_in_key
from flows.training.trainer import STEP_KEY, make_trainer
from flows.training.training_checkpoints import resumable_checkpoint
from lightning_modules.data.collator import MaskingCollator
from lightning_modules.data.masking_rules import MaskingRule
from lightning_modules.data.mlm_datamodule import GeneralRows, MaskedLMDataModule
from lightning_modules.data.shard_format import ShardIndex
from lightning_modules.electra_module import ReplacedTokenDetectionModule
from lightning_modules.export import can_export, export_huggingface
from lightning_modules.flops import electra_training_flops_per_token, mlm_training_flops_per_token
from lightning_modules.mlm import MaskedLanguageModelingModule, ThroughputSettings
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.electra import ElectraForPreTraining
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.models.serialization import (
    count_parameters,
    save_electra,
    save_masked_lm,
)
from lightning_modules.progress import ProgressLog

# TrainingStreamState makes mid-epoch resume exact; Lightning cannot see that and warns anyway.
warnings.filterwarnings("ignore", message=r".*resuming from a checkpoint that ended before")

STAGE = PretrainOutputs.STAGE
VERSION = 3
LAST_CHECKPOINT = "last.ckpt"
KEPT_DIR = "kept"  # kept/<fraction>/: weights at fractions of the budget (finetune.checkpoints)


def pretrain_record(
    settings: PretrainSettings, shards_key: str, tokenizer_key: str
) -> dict[str, Any]:
    """What the pretrain artifact key is made of; runtime keys (devices, workers) stay out."""
    record: dict[str, Any] = {
        "settings": {
            "model": model_in_key(settings.model),
            "objective": output_settings(settings.objective, exclude=("name",)),
            "trainer": settings.trainer.in_key(),
            "seed": settings.seed,
        },
        "inputs": {"shards": shards_key, "tokenizer": tokenizer_key},
    }
    if settings.keep_fractions:  # absent otherwise, so earlier artifacts keep their keys
        record["settings"]["keep_fractions"] = list(settings.keep_fractions)
    if settings.head_warmup_steps:  # likewise
        record["settings"]["head_warmup_steps"] = settings.head_warmup_steps
        # Its manifest holds the validation at the warm-up's end (the "before" of forgetting),
        # which artifacts made before 2026-12-06 lack: a new key, never two contents under one.
        record["settings"]["head_warmup_validation"] = True
    return record


def pretrain(
    settings: PretrainSettings,
    shards_ref: ArtifactRef,
    tokenizer_ref: ArtifactRef,
    store: ArtifactStore,
    loggers: Sequence[Logger] = (),
    start: InitPoint = SCRATCH,
) -> ArtifactRef:
    """Pretrains from `start`'s weights (the run's resolved starting point), or from random init
    where it holds none."""
    check_enough_sequences(shards_ref, settings.trainer)
    record = pretrain_record(settings, shards_ref.key, tokenizer_ref.key)
    init = start if start.weights is not None else None
    if init is not None:  # the weights' identity, never their path, enters the key
        check_loadable(init)
        check_same_tokenizer(init, tokenizer_ref)
        record["inputs"]["init_from"] = init.identity
    general = general_rows(settings, shards_ref, tokenizer_ref, store)
    if general is not None:  # the rows' key, never the files' paths; absent when off
        record["inputs"]["general_validation"] = general.key
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])
    job = PretrainJob(
        settings,
        shards_ref,
        tokenizer_ref,
        store.work_dir(STAGE, key),
        init,
        tuple(loggers),
        None if general is None else general.path,
    )
    return build_on_ranks(store, STAGE, key, record, settings.trainer, train_on_rank, job)


def general_rows(
    settings: PretrainSettings,
    shards_ref: ArtifactRef,
    tokenizer_ref: ArtifactRef,
    store: ArtifactStore,
) -> ArtifactRef | None:
    """`pretrain.general_validation` as validation rows of the run's tokenizer, shaped and packed
    as its shards are (their own artifact, reused by every run that shares them); None: off."""
    if settings.general_validation is None:
        return None
    shape = ShardIndex.load(shards_ref.path)
    return build_validation_rows(
        settings.general_validation.corpus(),
        tokenizer_ref,
        shape.seq_len,
        shape.packing,
        settings.trainer.max_validation_sequences,
        store,
        GENERAL_VALIDATION_KEY,
    )


def check_enough_sequences(shards_ref: ArtifactRef, trainer: TrainerSettings) -> None:
    """A corpus too small to train on is an input error (exit 2, never retried), found from
    the shards' counts before any process or Trainer starts."""
    outputs = shards_ref.outputs
    if "train_sequences" not in outputs:  # shards published before the counts were recorded
        return
    train, validation = int(outputs["train_sequences"]), int(outputs["validation_sequences"])
    if train < trainer.batch_size:
        raise CorpusInputError(
            f"the corpus gives {train} training sequences, fewer than trainer.batch_size="
            f"{trainer.batch_size} (shards {shards_ref.path}): add text or lower the batch size"
        )
    if trainer.max_validation_sequences and validation == 0:
        raise CorpusInputError(
            f"the corpus gives no validation sequence (shards {shards_ref.path}): raise "
            "corpus.validation_fraction or add text"
        )


@dataclass(frozen=True)
class PretrainJob:
    """What every training rank needs; picklable, so spawned ranks rebuild everything else."""

    settings: PretrainSettings
    shards_ref: ArtifactRef
    tokenizer_ref: ArtifactRef
    work_dir: Path
    init: InitPoint | None
    loggers: tuple[Logger, ...]
    general_rows: Path | None = None  # `pretrain.general_validation`'s rows (a shard set)


def train_on_rank(job: PretrainJob, directory: Path) -> dict[str, Any]:
    """Trains on this rank (all ranks take part); rank zero saves into `directory`."""
    settings, work_dir = job.settings, job.work_dir
    pl.seed_everything(settings.seed, workers=True, verbose=False)
    trained = load_tokenizer(job.tokenizer_ref)
    check_shards_match(job.shards_ref, job.tokenizer_ref)
    objective = settings.objective
    trainer_settings = settings.trainer
    config = run_encoder_config(settings.model, trained, job.init)
    data = MaskedLMDataModule(
        job.shards_ref.path,
        make_collator(objective, trained, settings.seed),
        trainer_settings.batch_size,
        settings.seed,
        trainer_settings.num_workers,
        trainer_settings.max_validation_sequences,
        objective.static_copies if objective.masking == "static" else None,
        document_separator=trained.special.sep if config.document_attention else None,
        general=general_masking(job.general_rows, trained, settings.seed),
    )
    total_steps = trainer_settings.total_steps(data.index.seq_len)
    model, module = build_module(settings, config, data.index.seq_len, total_steps)
    kept = {max(1, round(f * total_steps)): f for f in settings.keep_fractions}
    trainer = pretrain_trainer(
        job, data, total_steps, KeepWeights(model, kept, work_dir / KEPT_DIR)
    )
    if job.init is not None:
        load_initial_weights(model, job.init)
        if isinstance(module, MaskedLanguageModelingModule):
            module.track_drift_from(copy.deepcopy(module.model.encoder))  # where it starts
    initial = initial_validation(trainer, module, data, work_dir)  # step 0: logged too
    last = work_dir / "checkpoints" / LAST_CHECKPOINT
    # One decision for all ranks: a rank that looked later could see a newer checkpoint.
    resume_from = broadcast_from_rank_zero(
        str(resumable_checkpoint(last) or "") if is_rank_zero() else None
    )
    resumed = bool(resume_from)
    started = time.perf_counter()
    # weights_only: a checkpoint is data, never code, even if someone swapped the file.
    trainer.fit(module, datamodule=data, ckpt_path=resume_from or None, weights_only=True)
    fit_seconds = time.perf_counter() - started
    final = validation_figures(trainer.validate(module, datamodule=data, verbose=False))
    model = unsharded(trainer, model, settings, config, data.index.seq_len, total_steps)
    if not trainer.is_global_zero:
        return {}
    lineage = None if job.init is None else job.init.lineage
    exported = save_and_export(model, trained, job.tokenizer_ref.path, directory, lineage)
    if kept:
        shutil.copytree(work_dir / KEPT_DIR, directory / KEPT_DIR)
    tokens_per_step = (
        trainer_settings.batch_size * trainer_settings.accumulate_grad_batches * data.index.seq_len
    )
    return PretrainOutputs(
        initial_val_loss=initial["val_loss"],
        steps=trainer.global_step,
        train_tokens=trainer.global_step * tokens_per_step,
        fit_seconds=fit_seconds,
        parameters=count_parameters(model),
        resumed=resumed,
        huggingface_export=exported,
        validation={name.replace("/", "_"): value for name, value in final.items()},
        kept_checkpoints={
            f"{fraction:g}": {"steps": step, "tokens": step * tokens_per_step}
            for step, fraction in [*kept.items(), (trainer.global_step, 1.0)]
        },
        initial_val_general_loss=initial.get("val_general_loss"),
        initial_val_general_accuracy=initial.get("val_general_accuracy"),
        head_warmup_validation=warmup_validation(module),
        general_change_interval=general_change(module, work_dir, settings.seed),
    ).to_manifest()


def warmup_validation(module: pl.LightningModule) -> dict[str, float] | None:
    """The validation at the head warm-up's end, named as in the manifest; None without one."""
    if not isinstance(module, MaskedLanguageModelingModule):
        return None
    figures = module.head_warmup_validation
    return {name.replace("/", "_"): value for name, value in figures.items()} if figures else None


def general_change(
    module: pl.LightningModule, work_dir: Path, seed: int
) -> dict[str, float] | None:
    """The interval of the general loss's and accuracy's change from the run's "before" (the
    head warm-up's end, or step 0) to its last validation; None when not measured."""
    if not isinstance(module, MaskedLanguageModelingModule) or module.general_rows is None:
        return None
    warmed = bool(module.head_warmup_validation)
    before = module.head_warmup_general_rows if warmed else initial_rows(work_dir)
    return None if before is None else general_change_interval(before, module.general_rows, seed)


def general_masking(rows: Path | None, trained: TrainedTokenizer, seed: int) -> GeneralRows | None:
    """The general rows with BERT's masking at 15% (80/10/10 over single tokens), whatever the
    objective: as ModernBERT evaluates, so general losses compare across runs and recipes."""
    if rows is None:
        return None
    special = trained.special
    collator = MaskingCollator(MaskingRule(), trained.vocab_size, special.mask, special.all(), seed)
    return GeneralRows(rows, collator)


def validation_figures(results: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One validation's figures, whichever of its loaders' result dicts Lightning put each in;
    without `step`, the x value trainer.MetricSteps logs beside them, which is no figure."""
    return {name: value for result in results for name, value in result.items() if name != STEP_KEY}


class KeepWeights(pl.Callback):
    """Saves the network's weights after given optimizer steps, on rank zero, into the work dir
    (which survives a resume; the artifact gets a copy at the end)."""

    def __init__(
        self,
        model: BertForMaskedLM | ElectraForPreTraining,
        steps: dict[int, float],
        directory: Path,
    ) -> None:
        self.model, self.steps, self.directory = model, steps, directory

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        fraction = self.steps.get(trainer.global_step)
        if fraction is None or not trainer.is_global_zero:
            return
        target = self.directory / f"{fraction:g}"
        if target.is_dir():  # a later micro-batch of the same step, or a resumed run
            return
        partial = self.directory / f".{fraction:g}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        if isinstance(self.model, ElectraForPreTraining):
            save_electra(self.model, partial)
        else:
            save_masked_lm(self.model, partial)
        partial.rename(target)


def pretrain_trainer(
    job: PretrainJob, data: MaskedLMDataModule, total_steps: int, keep: KeepWeights
) -> pl.Trainer:
    """The Trainer with its checkpoints in the stage's work dir, on every process of the job."""
    return resumable_trainer(
        job.settings.trainer, job.work_dir, job.loggers, data, total_steps, STAGE, keep
    )


def resumable_trainer(
    settings: TrainerSettings,
    work_dir: Path,
    loggers: Sequence[Logger],
    data: MaskedLMDataModule,
    total_steps: int,
    stage: str,
    *extra: pl.Callback,
) -> pl.Trainer:
    """A training stage's Trainer: checkpoints in `work_dir` (a rerun resumes) with the data
    stream's exact state, then the stage's `extra` callbacks; shared by pretrain and distill."""
    checkpoints = ModelCheckpoint(
        dirpath=work_dir / "checkpoints",
        save_last=True,
        save_top_k=0,
        every_n_train_steps=settings.checkpoint_every_steps,
    )
    guard = divergence_guard(settings, stage, work_dir)  # before any checkpoint of a NaN step
    callbacks: list[pl.Callback] = [data.stream_state, checkpoints, guard, *extra]
    if is_rank_zero():  # one progress line per step, not one per rank
        tokens_per_step = (
            settings.batch_size * settings.accumulate_grad_batches * data.index.seq_len
        )
        callbacks.append(ProgressLog(settings.log_every_steps, stage, tokens_per_step))
    return make_trainer(
        settings,
        work_dir,
        loggers,
        callbacks,
        distributed=settings.world_size > 1,
        max_steps=total_steps,
        val_check_interval=settings.val_every_steps,
        check_val_every_n_epoch=None,
    )


def unsharded(
    trainer: pl.Trainer,
    model: BertForMaskedLM | ElectraForPreTraining,
    settings: PretrainSettings,
    config: EncoderConfig,
    seq_len: int,
    total_steps: int,
) -> BertForMaskedLM | ElectraForPreTraining:
    """The trained network with whole tensors: under FSDP each rank holds only shards of it."""
    if settings.trainer.strategy != "fsdp":
        return model
    state = trainer.strategy.lightning_module_state_dict()  # a collective: every rank calls it
    whole, _ = build_module(settings, config, seq_len, total_steps)
    if trainer.is_global_zero:
        whole.load_state_dict({name.removeprefix("model."): t for name, t in state.items()})
    return whole


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
    if objective.kind == "electra":
        optimizer = trainer.optimizer(total_steps)
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
    optimizer = trainer.optimizer(total_steps, settings.head_warmup_steps)
    model = BertForMaskedLM(config)
    if trainer.compile:
        model.encoder.compile()  # in place: parameter names, checkpoints and export unchanged
    flops = mlm_training_flops_per_token(config, seq_len, objective.mask_rate)
    throughput = ThroughputSettings(trainer.log_every_steps, flops, trainer.peak_flops)
    return model, MaskedLanguageModelingModule(
        model, optimizer, throughput, general_validation=settings.general_validation is not None
    )


def save_and_export(
    model: BertForMaskedLM | ElectraForPreTraining,
    trained: TrainedTokenizer,
    tokenizer_dir: Path,
    directory: Path,
    lineage: dict[str, Any] | None = None,
) -> bool:
    """Saves the weights; exports for transformers: as the class of the checkpoint the model
    descends from (`lineage`), else as the class that computes the same function, if any."""
    if isinstance(model, ElectraForPreTraining):
        save_electra(model, directory)
    else:
        save_masked_lm(model, directory)
    if lineage is not None:
        (directory / LINEAGE_FILE).write_text(json.dumps(lineage, indent=2))
        export_as_base_class(model, lineage, tokenizer_dir, directory / HUGGINGFACE_DIR)
        return True
    if not can_export(model):
        return False
    export_huggingface(
        model,
        tokenizer_dir / TOKENIZER_FILE,
        trained.settings.special_tokens,
        trained.settings.kind,
        trained.settings.lowercase,
        directory / HUGGINGFACE_DIR,
    )
    return True


INITIAL_FIGURES = ("val/loss", "val_general/loss", "val_general/accuracy")


def initial_validation(
    trainer: pl.Trainer, module: pl.LightningModule, data: MaskedLMDataModule, work_dir: Path
) -> dict[str, float]:
    """Validation of the untrained (or continued) model at step 0, logged like every later one:
    its loss, and the general text's loss and accuracy when measured (`val_loss`,
    `val_general_loss`, ...); kept across resumes as the 'before' of the curve, with the general
    rows' own figures (flows/stages/forgetting.py)."""
    saved = work_dir / "initial_validation.json"
    known = broadcast_from_rank_zero(
        json.loads(saved.read_text()) if is_rank_zero() and saved.is_file() else None
    )
    if known is not None:
        return {name: float(value) for name, value in known.items()}
    figures = validation_figures(trainer.validate(module, datamodule=data, verbose=False))
    initial = {
        name.replace("/", "_"): float(figures[name]) for name in INITIAL_FIGURES if name in figures
    }
    if trainer.is_global_zero:
        work_dir.mkdir(parents=True, exist_ok=True)
        if isinstance(module, MaskedLanguageModelingModule):
            save_initial_rows(module.general_rows, work_dir)  # before the figures that mark done
        replace_json(saved, initial)  # a kill mid-write must not break resume
    return initial
