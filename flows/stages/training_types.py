"""What the stages that run on torch (checkpoint import, pretrain, distill, finetune) take and
give, as plain data: their settings and their typed outputs (flows/core/outputs.py).

Apart from the stages themselves, which import torch, Lightning and transformers, so that what
reads them before or between stages (the plan, the pipeline's log lines, the summary) does not:
a served run is a fresh process whose first stage, the tokenizer, should not wait seconds for
those imports (docs/results/2026-12-03-served-start.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Self

from flows.core.outputs import StageOutputs
from flows.corpora import Corpus, CorpusSettings
from flows.corpora.general_text import general_text
from flows.downstream.statistics.task_figures import TaskFigures
from flows.stages.distill_plan import DistillSettings
from flows.stages.objectives import ObjectiveSettings
from flows.training.settings import ModelSettings, TrainerSettings

GENERAL_VALIDATION_KEY = "pretrain.general_validation"


@dataclass(frozen=True)
class GeneralValidation:
    """`pretrain.general_validation`: held-out general-domain text the pretrain stage scores at
    every validation (MLM loss and accuracy at 15% masking, fixed masks), to show what the model
    forgot; read as `corpus.paths` is, cleaned by the run corpus's rules."""

    paths: tuple[str, ...]
    file_format: str
    cleaning: CorpusSettings

    def corpus(self) -> Corpus:
        """The cleaned text; a glob that matches nothing names the setting."""
        return general_text(
            list(self.paths), self.file_format, GENERAL_VALIDATION_KEY, self.cleaning
        )


@dataclass(frozen=True)
class PretrainSettings:
    """What the pretrain stage trains with: `model.*`, `objective.*`, `trainer.*` and the seed
    (where it starts is the run's `InitPoint`, given to the stage beside them)."""

    model: ModelSettings
    objective: ObjectiveSettings
    trainer: TrainerSettings
    seed: int
    # Fractions of the budget (besides the end) whose weights are kept for the lift-vs-compute
    # curve; the pipeline passes `finetune.checkpoints`.
    keep_fractions: tuple[float, ...] = ()
    # `pretrain.head_warmup_steps`, resolved: the first steps train a new MLM head alone.
    head_warmup_steps: int = 0
    # `pretrain.general_validation`: None (off) keeps the stage's key and outputs as before.
    general_validation: GeneralValidation | None = None


@dataclass(frozen=True)
class DistillStageSettings:
    """`distill.*` with what it shares with pretraining: the masking, the trainer, the seed."""

    distill: DistillSettings
    objective: ObjectiveSettings
    trainer: TrainerSettings  # the run's; `distill.max_steps` / `learning_rate` applied here
    seed: int

    @property
    def student_trainer(self) -> TrainerSettings:
        return self.distill.trainer(self.trainer)


@dataclass(frozen=True)
class TrainingRunOutputs(StageOutputs):
    """The figures every training stage records first (pretrain's and distill's manifests)."""

    initial_val_loss: float
    steps: int
    train_tokens: int
    fit_seconds: float
    parameters: int


@dataclass(frozen=True)
class PretrainOutputs(TrainingRunOutputs):
    """The training run's figures; `validation` holds the objective's final `val_*` metrics.

    The manifest keeps the validation metrics flat (`val_loss`, `val_accuracy`, ...): which ones
    exist depends on the objective (MLM reports accuracy and perplexity, ELECTRA the
    discriminator's accuracy against the all-original baseline).
    """

    STAGE = "pretrain"
    resumed: bool
    huggingface_export: bool
    validation: dict[str, float]
    # Steps and tokens at each kept fraction of the budget ("1" is the end): the curve's x axis.
    kept_checkpoints: dict[str, dict[str, int]] = field(default_factory=dict)
    # `pretrain.general_validation` before any step (the starting weights'); the last values are
    # `validation`'s `val_general_loss` and `val_general_accuracy`. None (off): not in the manifest.
    initial_val_general_loss: float | None = None
    initial_val_general_accuracy: float | None = None
    # A checkpoint's fresh MLM head trained alone first: the validation at that warm-up's end
    # (`val_loss`, `val_general_loss`, ...), the base encoder under a fitted head. None: no warm-up.
    head_warmup_validation: dict[str, float] | None = None
    # The general loss's and accuracy's change from `before` to the end: a paired bootstrap over
    # the general rows (`loss_low`, `loss_high`, `accuracy_low`, `accuracy_high`, `confidence`;
    # flows/stages/forgetting.py). None: not measured.
    general_change_interval: dict[str, float] | None = None

    @property
    def val_loss(self) -> float:
        return self.validation["val_loss"]

    @property
    def before(self) -> dict[str, float]:
        """What the run's learning and forgetting are measured from: the validation before the
        encoder's first step. With a head warm-up, its end: at step 0 the fresh head scores chance
        (a loss near log(vocabulary)), so every change from there would read as a gain."""
        if self.head_warmup_validation is not None:
            return self.head_warmup_validation
        initial = {
            "val_loss": self.initial_val_loss,
            "val_general_loss": self.initial_val_general_loss,
            "val_general_accuracy": self.initial_val_general_accuracy,
        }
        return {name: value for name, value in initial.items() if value is not None}

    @property
    def general_loss_change(self) -> float | None:
        """How much the loss on general text rose over the run (None: not measured)."""
        before = self.before.get("val_general_loss")
        return None if before is None else self.validation["val_general_loss"] - before

    def to_manifest(self) -> dict[str, Any]:
        outputs = {
            item.name: getattr(self, item.name)
            for item in fields(self)
            if getattr(self, item.name) is not None
        }
        return {**outputs.pop("validation"), **outputs}

    @classmethod
    def from_manifest(cls, outputs: Mapping[str, Any]) -> PretrainOutputs:
        validation = {name: value for name, value in outputs.items() if name.startswith("val_")}
        return super().from_manifest({**outputs, "validation": validation})


@dataclass(frozen=True)
class DistillOutputs(TrainingRunOutputs):
    STAGE = "distill"
    teacher_parameters: int
    student_init: str
    layer_map: list[int]
    huggingface_export: bool
    val_loss: float
    val_accuracy: float
    val_perplexity: float
    val_teacher_agreement: float
    val_teacher_loss: float


@dataclass(frozen=True)
class CheckpointOutputs(StageOutputs):
    """What was imported: the family, the class, the size, and whether an MLM head came too."""

    STAGE = "checkpoint"
    model_type: str
    architecture: str
    name: str
    parameters: int
    has_mlm_head: bool
    import_seconds: float


@dataclass(frozen=True)
class FinetuneOutputs(StageOutputs):
    """The tasks and their figures. The manifest keeps them flat (`<task>.<key>`, as MLflow logs
    them); `figures` reads each task's through attributes."""

    STAGE: ClassVar[str] = "finetune"
    tasks: list[str]
    confidence: float
    figures: dict[str, TaskFigures] = field(default_factory=dict)

    @classmethod
    def from_manifest(cls, outputs: Mapping[str, Any]) -> Self:
        read = super().from_manifest(outputs)
        return replace(read, figures={task: TaskFigures.read(outputs, task) for task in read.tasks})

    def to_manifest(self) -> dict[str, Any]:
        return {
            "tasks": list(self.tasks),
            "confidence": self.confidence,
            **{
                f"{task}.{key}": value
                for task, figures in self.figures.items()
                for key, value in figures.metrics.items()
            },
        }
