"""Stage: distill a teacher (a pretrain artifact) into a smaller student on the run's shards.

The student reads the same masked batches as pretraining (dynamic masking, the objective's
collator); the losses are those of lightning_modules/distill_module.py, weighted by `distill.*`. The
artifact is laid out like a pretrain artifact (weights, config, Hugging Face export), so the
finetune stage, the exporter and `distill.teacher` of a later run all read it as they read one.
Its key holds the teacher's weights hash, the student's shape and init, and the recipe.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.loggers import Logger

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.core.settings import output_settings
from flows.stages.collators import make_collator
from flows.stages.distill_plan import (
    StudentPlan,
    check_teacher_tokenizer,
    plan_student,
    teacher_config,
    teacher_identity,
)
from flows.stages.pretrain import (
    check_shards_match,
    resumable_trainer,
    save_and_export,
    validation_figures,
)
from flows.stages.tokenizer import load_tokenizer
from flows.stages.training_types import DistillOutputs, DistillStageSettings
from flows.training.launch import broadcast_from_rank_zero, build_on_ranks, is_rank_zero
from flows.training.settings import TrainerSettings, encoder_config, model_in_key
from flows.training.training_checkpoints import resumable_checkpoint
from lightning_modules.data.mlm_datamodule import MaskedLMDataModule
from lightning_modules.distill_module import DistillationModule
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.models.serialization import count_parameters, load_masked_lm
from lightning_modules.models.student_init import init_from_teacher

# The frozen teacher is in eval mode on purpose (no dropout in its targets).
warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode at the start of training")

STAGE = DistillOutputs.STAGE
VERSION = 2
LAST_CHECKPOINT = "last.ckpt"


def distill_record(
    settings: DistillStageSettings,
    plan: StudentPlan,
    teacher_identity: str,
    shards_key: str,
    tokenizer_key: str,
) -> dict[str, Any]:
    """The key: teacher weights, student shape, init and mapping, recipe; never where it runs."""
    distill = output_settings(
        settings.distill, exclude=("teacher", "registered_model", "allow_larger_student")
    )
    return {
        "settings": {
            "distill": {
                **distill,
                "student": model_in_key(settings.distill.student),
                "layer_map": list(plan.layer_map),
                "student_init": plan.init,
            },
            "objective": output_settings(settings.objective, exclude=("name",)),
            "trainer": settings.student_trainer.in_key(),
            "seed": settings.seed,
        },
        "inputs": {
            "teacher": teacher_identity,
            "shards": shards_key,
            "tokenizer": tokenizer_key,
        },
    }


def distill(
    settings: DistillStageSettings,
    teacher: ArtifactRef,
    shards_ref: ArtifactRef,
    tokenizer_ref: ArtifactRef,
    store: ArtifactStore,
    loggers: Sequence[Logger] = (),
) -> ArtifactRef:
    given_as = settings.distill.teacher or str(teacher.path)
    check_teacher_tokenizer(teacher, tokenizer_ref.key, given_as)
    trained = load_tokenizer(tokenizer_ref)
    student = encoder_config(settings.distill.student, trained.vocab_size, trained.special.pad)
    plan = plan_student(settings.distill, student, teacher_config(teacher), given_as)
    identity = teacher_identity(teacher)
    record = distill_record(settings, plan, identity, shards_ref.key, tokenizer_ref.key)
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])
    work_dir = store.work_dir(STAGE, key)
    job = DistillJob(
        settings, plan, teacher.path, shards_ref, tokenizer_ref, work_dir, tuple(loggers)
    )
    trainer = settings.student_trainer
    return build_on_ranks(store, STAGE, key, record, trainer, distill_on_rank, job)


@dataclass(frozen=True)
class DistillJob:
    """What every training rank needs; picklable, so spawned ranks rebuild everything else."""

    settings: DistillStageSettings
    plan: StudentPlan
    teacher_dir: Path
    shards_ref: ArtifactRef
    tokenizer_ref: ArtifactRef
    work_dir: Path
    loggers: tuple[Logger, ...]


def build_student(
    job: DistillJob, vocab_size: int, pad: int, teacher: BertForMaskedLM
) -> BertForMaskedLM:
    """The student at its preset's shape; from the mapped teacher layers when the plan says so."""
    config = encoder_config(job.settings.distill.student, vocab_size, pad)
    student = BertForMaskedLM(config)
    if job.plan.init == "teacher":
        init_from_teacher(student, teacher, job.plan.layer_map)
    return student


def distill_on_rank(job: DistillJob, directory: Path) -> dict[str, Any]:
    """Trains the student on this rank; rank zero saves it (and its export) into `directory`."""
    settings = job.settings
    trainer_settings = settings.student_trainer
    pl.seed_everything(settings.seed, workers=True, verbose=False)
    trained = load_tokenizer(job.tokenizer_ref)
    check_shards_match(job.shards_ref, job.tokenizer_ref)
    data = MaskedLMDataModule(
        job.shards_ref.path,
        make_collator(settings.objective, trained, settings.seed),
        trainer_settings.batch_size,
        settings.seed,
        trainer_settings.num_workers,
        trainer_settings.max_validation_sequences,
        settings.objective.static_copies if settings.objective.masking == "static" else None,
    )
    total_steps = trainer_settings.total_steps(data.index.seq_len)
    teacher = load_masked_lm(job.teacher_dir)
    student = build_student(job, trained.vocab_size, trained.special.pad, teacher)
    module = DistillationModule(
        student,
        teacher,
        settings.distill.losses(trainer_settings.precision),
        job.plan.layer_map,
        trainer_settings.optimizer(total_steps),
    )
    trainer = distill_trainer(job, trainer_settings, data, total_steps)
    initial = trainer.validate(module, datamodule=data, verbose=False)[0]["val/loss"]
    last = job.work_dir / "checkpoints" / LAST_CHECKPOINT
    resume_from = broadcast_from_rank_zero(
        str(resumable_checkpoint(last) or "") if is_rank_zero() else None
    )
    started = time.perf_counter()
    trainer.fit(module, datamodule=data, ckpt_path=resume_from or None, weights_only=True)
    fit_seconds = time.perf_counter() - started
    final = validation_figures(trainer.validate(module, datamodule=data, verbose=False))
    if not trainer.is_global_zero:
        return {}
    exported = save_and_export(student, trained, job.tokenizer_ref.path, directory)
    tokens_per_step = (
        trainer_settings.batch_size * trainer_settings.accumulate_grad_batches * data.index.seq_len
    )
    return DistillOutputs(
        initial_val_loss=float(initial),
        steps=trainer.global_step,
        train_tokens=trainer.global_step * tokens_per_step,
        fit_seconds=fit_seconds,
        parameters=count_parameters(student),
        teacher_parameters=count_parameters(teacher),
        student_init=job.plan.init,
        layer_map=list(job.plan.layer_map),
        huggingface_export=exported,
        **{name.replace("/", "_"): float(value) for name, value in final.items()},
    ).to_manifest()


def distill_trainer(
    job: DistillJob, settings: TrainerSettings, data: MaskedLMDataModule, total_steps: int
) -> pl.Trainer:
    """Checkpoints in the stage's work dir (a rerun resumes), the data stream's exact state."""
    return resumable_trainer(settings, job.work_dir, job.loggers, data, total_steps, STAGE)
