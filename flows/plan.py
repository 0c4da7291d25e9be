"""The whole run config as one settings class, validated before any service or stage starts.

`RunConfig` has one field per config group (its class lives beside the code that reads it) and
refuses unknown top-level keys, including ones added with Hydra's `+key=` syntax. `PipelinePlan`
regroups it into what each stage receives. Nothing here imports Prefect: the CLI validates, then
points Prefect at the run's home (`configure_services`), then imports the flow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from flows.core.artifacts import ArtifactStore
from flows.core.paths import PathSettings, RunPaths, configure_services
from flows.core.settings import ConfigError, Number, Settings, bounds, one_of, settings_from
from flows.corpora import Corpus, CorpusSettings, open_corpus
from flows.corpora.excluded import ExcludedTexts
from flows.corpora.formats import FORMATS
from flows.downstream.settings import FinetuneSettings, recipe_key
from flows.stages.distill_plan import DistillSettings, plan_student
from flows.stages.init_point import SCRATCH, InitPoint
from flows.stages.objectives import ObjectiveSettings
from flows.stages.shards.stage import ShardSettings
from flows.stages.tokenizer import TokenizerSettings
from flows.stages.training_types import (
    GENERAL_VALIDATION_KEY,
    DistillStageSettings,
    GeneralValidation,
    PretrainSettings,
)
from flows.tracking.settings import TrackingSettings
from flows.training.hardware import Hardware
from flows.training.precision_choice import PrecisionChoice, resolve_precision
from flows.training.settings import ModelSettings, TrainerSettings, encoder_config
from lightning_modules.models.config import EncoderConfig

# The pipeline's stages in order (`until` stops after one). distill runs only when configured
# (distill=default); with distill.teacher set, pretrain is skipped and the teacher stands in.
STAGES = ("tokenizer", "shards", "pretrain", "distill", "finetune")


class InitSettings(Settings):
    """`pretrain.*`: where pretraining starts (a pretrain artifact directory, a `transformers`
    checkpoint folder or Hub name, or a models:/ URI: flows/stages/init_point.py resolves it),
    and the general text it is watched on for forgetting."""

    section = "pretrain"

    init_from: str | None = None
    """Continue given weights: a checkpoint folder or Hub name, a pretrain artifact, models:/."""
    head_warmup_steps: Annotated[int, bounds(ge=0)] | None = None
    """Steps a new MLM head trains alone first; null: 100 for a checkpoint without one, else 0."""
    general_validation: list[str] = Field(default_factory=list)
    """Held-out general text (files, globs, dirs) scored at every validation; []: off."""
    general_validation_format: Annotated[str, one_of(FORMATS)] = "auto"
    """The format of general_validation's files, as corpus.format (auto: by suffix)."""

    def general(self, cleaning: CorpusSettings) -> GeneralValidation | None:
        """`general_validation` as the pretrain stage reads it, cleaned by `cleaning`'s rules."""
        if not self.general_validation:
            return None
        return GeneralValidation(
            tuple(self.general_validation), self.general_validation_format, cleaning
        )


class RefreshSettings(Settings):
    """`refresh.*`: which domain, where its models live, and what makes a challenger win."""

    section = "refresh"
    domain: str | None = None
    """Names the domain's fingerprint manifest (<artifact root>/domains/<domain>/)."""
    registered_model: str | None = None
    """Registry entry holding @champion and @challenger; null: cloze-<domain>."""
    metric: str = "pydoc_topics.pretrained_accuracy_mean"
    """Any numeric finetune output key: what makes a challenger win."""
    higher_is_better: bool = True
    """Whether a higher `metric` is better."""
    margin: Annotated[Number, bounds(ge=0)] = 0.0
    """Promote only when the challenger wins by more than this."""
    max_general_loss_increase: Annotated[Number, bounds(ge=0)] | None = None
    """Refuse a challenger whose general validation loss rose more than this; null: off."""

    @model_validator(mode="after")
    def _names_are_usable(self) -> RefreshSettings:
        if self.domain is not None and not self.domain.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(
                f"refresh.domain={self.domain!r} must be a name of letters, digits, - and _ "
                "(it names the fingerprint manifest's folder and the registered model)"
            )
        if not self.metric:
            raise ConfigError(
                "refresh.metric must name a finetune output, e.g. "
                "pydoc_topics.pretrained_accuracy_mean"
            )
        return self

    def require_domain(self) -> str:
        if self.domain is None:
            raise ConfigError(
                "domain-refresh needs refresh.domain (e.g. refresh.domain=legal) and "
                "corpus=files with corpus.paths pointing at the growing corpus directory"
            )
        return self.domain

    @property
    def model_name(self) -> str:
        """The registry entry whose `champion` and `challenger` aliases this domain moves."""
        return self.registered_model or f"cloze-{self.require_domain()}"


class RunConfig(Settings):
    """Everything `conf/config.yaml` composes, each section typed: what the stages read (built
    once per run where it enters: flows/resolve.py)."""

    paths: PathSettings
    corpus: CorpusSettings
    tokenizer: TokenizerSettings
    model: ModelSettings
    objective: ObjectiveSettings
    trainer: TrainerSettings
    finetune: FinetuneSettings
    tracking: TrackingSettings
    refresh: RefreshSettings = RefreshSettings()
    seed: Annotated[int, bounds(ge=0, lt=1 << 32)]
    pretrain: InitSettings = InitSettings()
    shards: ShardSettings
    distill: DistillSettings | None = None
    # The overrides the config was composed from (flows/core/config.py): what the user set.
    overrides: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _model_fits_the_vocabulary(self) -> RunConfig:
        # The shape is checked now, with the configured vocabulary as a stand-in, so a bad
        # `model.*` value fails before the tokenizer and shards stages spend any time.
        shape = encoder_config(self.model, self.tokenizer.vocab_size, 0)
        if self.distill is not None:
            self._distill_fits(self.distill, shape)
        return self

    def check_rows_fit(self) -> None:
        """The shards' rows against the model (check_sequence_fits): a run that builds shards
        and pretrains on them calls this; `cloze evaluate` builds none, so a checkpoint with
        fewer positions than `shards.seq_len` is scored as it is."""
        shape = encoder_config(self.model, self.tokenizer.vocab_size, 0)
        check_sequence_fits(shape, self.shards.seq_len)

    @model_validator(mode="after")
    def _head_warmup_fits(self) -> RunConfig:
        steps = self.pretrain.head_warmup_steps
        if not steps:
            return self
        if self.objective.kind == "electra":
            raise ConfigError(
                f"pretrain.head_warmup_steps={steps} trains a new MLM head alone, but objective="
                f"{self.objective.name} pretrains ELECTRA: set it to 0 or use objective=mlm"
            )
        if self.trainer.max_tokens is None and steps >= self.trainer.max_steps:
            raise ConfigError(
                f"pretrain.head_warmup_steps={steps} leaves no step of trainer.max_steps="
                f"{self.trainer.max_steps} for the whole model: lower it or raise max_steps"
            )
        return self

    @model_validator(mode="after")
    def _general_validation_is_measurable(self) -> RunConfig:
        if self.pretrain.general_validation and self.objective.kind == "electra":
            raise ConfigError(
                f"{GENERAL_VALIDATION_KEY} is scored with the masked-LM head, but objective="
                f"{self.objective.name} pretrains ELECTRA: drop it or use objective=mlm"
            )
        bound = self.refresh.max_general_loss_increase
        if bound is not None and not self.pretrain.general_validation:
            raise ConfigError(
                f"refresh.max_general_loss_increase={bound} compares the general validation "
                f"loss, but {GENERAL_VALIDATION_KEY} is not set: name held-out general text "
                f"(e.g. {GENERAL_VALIDATION_KEY}=[/data/wiki/wiki_00]) or drop the bound"
            )
        return self

    @model_validator(mode="after")
    def _excluded_tasks_are_known(self) -> RunConfig:
        for name in self.corpus.exclude_validation_of:
            if name not in self.finetune.catalog:
                raise ConfigError(
                    f"corpus.exclude_validation_of: {name!r} is not in finetune.catalog (known: "
                    f"{', '.join(sorted(self.finetune.catalog))}); name a task of the catalog"
                )
        return self

    @model_validator(mode="after")
    def _prompts_have_a_head_to_read(self) -> RunConfig:
        if self.objective.kind != "electra":
            return self
        for spec, recipe in ((task.spec, task.recipe) for task in self.finetune.plan):
            if recipe.prompt is not None:
                key = recipe_key(spec.name, "prompt", spec.recipe)
                raise ConfigError(
                    f"{key} reads the masked-LM head, but objective={self.objective.name} "
                    "pretrains ELECTRA, whose discriminator has none; drop the prompt or use "
                    "objective=mlm"
                )
        return self

    def _distill_fits(self, distill: DistillSettings, teacher: EncoderConfig) -> None:
        """The student's shape, and against this run's own model when that is the teacher (an
        external teacher is checked by the pipeline once it is resolved, still before work)."""
        student = encoder_config(distill.student, self.tokenizer.vocab_size, 0)
        if distill.external_teacher:
            return
        if self.objective.kind == "electra":
            raise ConfigError(
                f"distill=... needs a masked-LM teacher, but objective={self.objective.name} "
                "pretrains ELECTRA; use objective=mlm or give distill.teacher"
            )
        plan_student(distill, student, teacher, f"(this run's model={self.model.name})")


def check_sequence_fits(shape: EncoderConfig, seq_len: int) -> None:
    """The shards' rows must fit the model's positions, and a sliding window must not be wider
    than a row (a "local" layer would then be a global one, or nearly)."""
    if shape.position_embedding == "absolute" and seq_len > shape.max_position_embeddings:
        raise ConfigError(
            f"shards.seq_len={seq_len} exceeds model.max_position_embeddings="
            f"{shape.max_position_embeddings}, the range of its absolute positions: shorten "
            "the rows, or raise the range (or use model.position_embedding=rotary)"
        )
    if shape.has_local_layers and shape.local_attention > seq_len:
        raise ConfigError(
            f"model.local_attention={shape.local_attention} is larger than shards.seq_len="
            f"{seq_len}: the sliding window covers whole rows; lower it, or set "
            "model.global_attention_every=1 for global attention everywhere"
        )


@dataclass(frozen=True)
class PipelinePlan:
    """Every stage's settings, validated before any stage starts."""

    corpus: CorpusSettings
    tokenizer: TokenizerSettings
    shards: ShardSettings
    pretrain: PretrainSettings
    finetune: FinetuneSettings
    tracking: TrackingSettings
    distill: DistillStageSettings | None = None
    # Where pretraining starts, as `resolve_run` resolved it: a `transformers` checkpoint is
    # imported (its tokenizer replaces training one) and pretraining continues the import.
    init: InitPoint = SCRATCH
    # `trainer.precision` as resolved for this machine, and why: every stage trains in it.
    precision: PrecisionChoice | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any], hardware: Hardware | None = None) -> PipelinePlan:
        """A pipeline's plan from its composed config, validated whole (its rows included)."""
        run = load_run_config(config)
        run.check_rows_fit()
        return cls.from_run_config(run, hardware)

    @classmethod
    def from_run_config(
        cls, run: RunConfig, hardware: Hardware | None = None, init: InitPoint | None = None
    ) -> PipelinePlan:
        """The stages' settings, `trainer.precision` resolved on this machine (`hardware`, a
        test's stand-in, instead of the detected one; a timed probe is cached in the store).
        `init` is the run's resolved starting point (`ResolvedRun.init`); a caller holding only
        the config gets the one its `pretrain.init_from` names."""
        store = ArtifactStore(RunPaths.from_settings(run.paths).artifacts)
        trainer, precision = resolved_trainer(run.trainer, store, hardware)
        pretrain = PretrainSettings(
            run.model,
            run.objective,
            trainer,
            run.seed,
            keep_fractions=run.finetune.curve_fractions,
            head_warmup_steps=run.pretrain.head_warmup_steps or 0,
            general_validation=run.pretrain.general(run.corpus),
        )
        if pretrain.keep_fractions and run.trainer.strategy == "fsdp":
            raise ConfigError(
                "finetune.checkpoints below 1.0 need whole weights mid-run; trainer.strategy=fsdp "
                "shards them: use ddp, or finetune.checkpoints=[1.0]"
            )
        distill = (
            None
            if run.distill is None
            else DistillStageSettings(run.distill, run.objective, trainer, run.seed)
        )
        return cls(
            run.corpus,
            run.tokenizer,
            run.shards,
            pretrain,
            run.finetune,
            run.tracking,
            distill,
            InitPoint.of_adopted(run.pretrain.init_from) if init is None else init,
            precision,
        )

    @property
    def checkpoint(self) -> Path | None:
        """The `transformers` checkpoint the run imports and continues, if any."""
        return self.init.checkpoint

    def open_corpus(self, corpus: CorpusSettings | None = None) -> Corpus:
        """The run's corpus (or `corpus`, a variant of it) without the validation examples of
        the tasks it names in `exclude_validation_of`, as this run's finetune stage reads them
        (flows/corpora/excluded.py). A missing path or empty glob fails here."""
        settings = corpus or self.corpus
        tasks = settings.exclude_validation_of
        if not tasks:
            return open_corpus(settings)
        texts = self.finetune.validation_texts(tasks, self.pretrain.seed)
        return open_corpus(settings, ExcludedTexts.of(tasks, texts))


def resolved_trainer(
    trainer: TrainerSettings, store: ArtifactStore | None = None, hardware: Hardware | None = None
) -> tuple[TrainerSettings, PrecisionChoice]:
    """`trainer` with `precision` resolved on this machine (`auto`: what it computes fastest),
    and why. The one call of the resolver: a run's plan makes it once and every stage reads the
    precision it is given, so no key or Trainer ever holds `auto`; a test or benchmark that
    calls a stage directly resolves through here too."""
    choice = resolve_precision(trainer.precision, trainer.accelerator, store, hardware)
    return trainer.model_copy(update={"precision": choice.precision}), choice


def load_run_config(config: dict[str, Any]) -> RunConfig:
    """The composed config, validated whole; a problem is a ConfigError naming the key."""
    return settings_from(RunConfig, config, "")


def start_services(run: RunConfig) -> RunPaths:
    """`configure_services` for a validated config: must run before `import prefect`."""
    return configure_services(
        RunPaths.from_settings(run.paths), run.tracking.uri, run.tracking.request_timeout_seconds
    )
