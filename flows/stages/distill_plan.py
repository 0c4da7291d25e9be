"""`distill.*`: the settings of the distill stage, its teacher, and the checks made before any work.

Every refusal here happens before a tokenizer or shard is built: a teacher trained with another
tokenizer, a layer mapping the shapes cannot take, a student larger than its teacher (unless
`distill.allow_larger_student`), attention matching across different head counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import model_validator

from flows.core.artifacts import (
    MANIFEST_FILE,
    ArtifactError,
    ArtifactRef,
    ArtifactStore,
    file_sha256,
    read_manifest,
)
from flows.core.settings import (
    ConfigError,
    Number,
    bounds,
    library_config,
    one_of,
    settings_of,
)
from flows.stages.checkpoint_preflight import read_shape
from flows.stages.init_source import (
    is_checkpoint_folder,
    is_hub_name,
    is_registry_uri,
    locate,
    transformer_module,
)
from flows.stages.tokenizer import TokenizerSettings, reused_tokenizer
from flows.training.settings import ModelSettings, TrainerSettings, encoder_config
from lightning_modules.distill_losses import DistillLosses
from lightning_modules.models.config import (
    ELECTRA_CONFIG_FILE,
    WEIGHTS_FILE,
    EncoderConfig,
    load_encoder_config,
)
from lightning_modules.models.student_init import copy_mismatches, uniform_layer_map

INITS = ("auto", "teacher", "random")
TEACHER_STAGES = ("pretrain", "checkpoint")  # checkpoint: an imported transformers model


class DistillSettings(settings_of(DistillLosses)):  # type: ignore[misc]
    """`distill.*`: the teacher, the student's shape and init, the loss weights (`DistillLosses`'
    fields, their one home), the budget."""

    section = "distill"

    teacher: str | None = None
    """null: this run's pretrain artifact; else an artifact directory, a checkpoint or models:/."""
    student: ModelSettings
    """The student's `model.*`: a model preset (model@distill.student=bert-mini) and overrides."""
    student_init: Annotated[Literal["auto", "teacher", "random"], one_of(INITS)] = "auto"
    """auto: the teacher's layers when the shapes allow, else random | teacher | random."""
    layer_map: list[Annotated[int, bounds(ge=0)]] | None = None
    """Student layer i <- teacher layer layer_map[i] (0-based); null: spread evenly."""
    allow_larger_student: bool = False
    """Allow a student no smaller than its teacher."""
    max_steps: Annotated[int, bounds(ge=1)] | None = None
    """The student's steps; null: trainer.max_steps."""
    learning_rate: Annotated[Number, bounds(gt=0)] | None = None
    """The student's rate; null: trainer.learning_rate."""
    registered_model: str | None = None
    """Register the student under this name (e.g. cloze-student); null: not registered."""

    @model_validator(mode="after")
    def _some_loss(self) -> DistillSettings:
        weights = (self.kl_weight, self.mlm_weight, self.cosine_weight)
        if not any((*weights, self.hidden_mse_weight, self.attention_mse_weight)):
            raise ConfigError(
                "distill.*_weight are all 0: the student would learn nothing; set "
                "distill.kl_weight (and/or mlm, cosine, hidden_mse, attention_mse) above 0"
            )
        return self

    @property
    def external_teacher(self) -> bool:
        return self.teacher is not None

    def losses(self, precision: str) -> DistillLosses:
        """The loss weights; the teacher in bf16 only in a bf16-mixed run (`precision`, resolved):
        where bf16 is emulated, 32-true, it would be the slowest part of the step."""
        losses = library_config(self, DistillLosses)
        return replace(losses, teacher_bf16=losses.teacher_bf16 and precision == "bf16-mixed")

    def trainer(self, trainer: TrainerSettings) -> TrainerSettings:
        """The run's trainer with the student's own budget and rate, when given."""
        update: dict[str, Any] = {}
        if self.max_steps is not None:
            update.update(max_steps=self.max_steps, max_tokens=None)
        if self.learning_rate is not None:
            update["learning_rate"] = self.learning_rate
        return trainer.model_copy(update=update)


@dataclass(frozen=True)
class StudentPlan:
    """What the shapes decided: the layer mapping and how the student starts."""

    layer_map: tuple[int, ...]
    init: Literal["teacher", "random"]


def plan_student(
    settings: DistillSettings, student: EncoderConfig, teacher: EncoderConfig, teacher_name: str
) -> StudentPlan:
    """The mapping and init, or a ConfigError naming the `distill.*` key the shapes refuse."""
    layer_map = tuple(
        settings.layer_map or uniform_layer_map(student.num_layers, teacher.num_layers)
    )
    if len(layer_map) != student.num_layers:
        raise ConfigError(
            f"distill.layer_map={list(layer_map)} has {len(layer_map)} entries but the student "
            f"(distill.student.num_layers) has {student.num_layers} layers: give one teacher "
            "layer per student layer, or null for an even spread"
        )
    beyond = [layer for layer in layer_map if layer >= teacher.num_layers]
    if beyond:
        raise ConfigError(
            f"distill.layer_map={list(layer_map)} names teacher layer(s) {beyond}, but the teacher "
            f"{teacher_name} has {teacher.num_layers} layers (0..{teacher.num_layers - 1})"
        )
    if settings.attention_mse_weight and student.num_heads != teacher.num_heads:
        raise ConfigError(
            f"distill.attention_mse_weight={settings.attention_mse_weight} matches attention maps "
            f"head by head, but the student has distill.student.num_heads={student.num_heads} "
            f"and the teacher {teacher_name} {teacher.num_heads}: set equal head counts or "
            "distill.attention_mse_weight=0"
        )
    mismatches = copy_mismatches(student, teacher)
    if settings.student_init == "teacher" and mismatches:
        raise ConfigError(
            f"distill.student_init=teacher copies teacher layers {list(layer_map)} into the "
            f"student, but the shapes differ: distill.student.{', '.join(mismatches)}; "
            "use distill.student_init=random (or auto)"
        )
    check_not_larger(settings, student, teacher, teacher_name)
    wants_copy = settings.student_init != "random" and not mismatches
    return StudentPlan(layer_map, "teacher" if wants_copy else "random")


def parameters_of(config: EncoderConfig) -> int:
    """The masked LM's parameter count, without allocating its weights.

    The model is built on torch's meta device, so torch is imported here, when a config that
    distils is checked, and not with this module: the plan imports it for every run.
    """
    import torch

    from lightning_modules.models.heads import BertForMaskedLM
    from lightning_modules.models.serialization import count_parameters

    with torch.device("meta"):
        return count_parameters(BertForMaskedLM(config))


def check_not_larger(
    settings: DistillSettings, student: EncoderConfig, teacher: EncoderConfig, teacher_name: str
) -> None:
    ours, theirs = parameters_of(student), parameters_of(teacher)
    if ours > theirs and not settings.allow_larger_student:
        raise ConfigError(
            f"distill.student ({student.num_layers} layers x {student.hidden_size}, {ours:,} "
            f"parameters) is larger than its teacher {teacher_name} ({theirs:,}): distillation "
            "compresses; set distill.allow_larger_student=true to do it anyway"
        )


def teacher_ref(path: Path, given_as: str) -> ArtifactRef:
    """The published artifact at `path`, verified by its store; refused unless a masked LM."""
    path = path.expanduser().resolve()
    if not (path / MANIFEST_FILE).is_file():
        raise ConfigError(
            f"distill.teacher={given_as!r} is not a published artifact ({path / MANIFEST_FILE} is "
            "missing): give <artifact root>/pretrain/<key> or models:/<name>@<alias>"
        )
    stage = read_manifest(path / MANIFEST_FILE).get("stage")
    if stage not in TEACHER_STAGES or (path / ELECTRA_CONFIG_FILE).is_file():
        kind = "ELECTRA " if (path / ELECTRA_CONFIG_FILE).is_file() else ""
        raise ConfigError(
            f"distill.teacher={given_as!r} is a {kind}{stage} artifact; a teacher is a masked-LM "
            f"artifact of stage {' or '.join(TEACHER_STAGES)}"
        )
    try:
        found = ArtifactStore(path.parents[1]).lookup(stage, path.name)
    except ArtifactError as error:
        raise ConfigError(f"distill.teacher={given_as!r} is damaged: {error}") from error
    assert found is not None  # its manifest exists
    return found


def teacher_tokenizer(ref: ArtifactRef) -> str | None:
    inputs = read_manifest(ref.path / MANIFEST_FILE).get("inputs", {})
    return inputs.get("tokenizer") if isinstance(inputs, dict) else None


def check_teacher_tokenizer(ref: ArtifactRef, tokenizer_key: str, given_as: str) -> None:
    """Token ids mean nothing across vocabularies: the teacher's tokenizer must be this run's."""
    trained_with = teacher_tokenizer(ref)
    if trained_with != tokenizer_key:
        raise ConfigError(
            f"distill.teacher={given_as!r} was trained with tokenizer {trained_with}, this run's "
            f"tokenizer is {tokenizer_key}: a student must read the teacher's token ids; drop "
            f"tokenizer.from_artifact (the teacher's is then used) or set it to {ref.path}"
        )


def external_teacher(
    settings: DistillSettings,
    tokenizer: TokenizerSettings,
    store: ArtifactStore,
    resolve_uri: Callable[[str], Path],
    import_folder: Callable[[Path, str], ArtifactRef],
) -> tuple[ArtifactRef, TokenizerSettings]:
    """`distill.teacher` resolved and checked before any stage runs; the tokenizer to use.

    A `transformers` checkpoint (folder or Hub name) is imported first (`import_folder`, told
    the key to name in a fault only the import finds), as DistilBERT started from BERT-base.
    Without `tokenizer.from_artifact` the teacher's own tokenizer is reused (a student must read
    the teacher's token ids); with one, it must be the teacher's.
    """
    given = settings.teacher
    assert given is not None
    if is_registry_uri(given):
        path = resolve_uri(given)
    else:
        path = locate(given, "distill.teacher") if is_hub_name(given) else Path(given)
    if path.is_dir():
        path = transformer_module(path, "distill.teacher")
    if is_checkpoint_folder(path):
        read_shape(path, "distill.teacher")  # every fault of its files, under the key given
        ref = import_folder(path, "distill.teacher")
    else:
        ref = teacher_ref(path, given)
    if tokenizer.from_artifact is None:
        tokenizer = tokenizer.model_copy(update={"from_artifact": str(ref.path)})
    assert tokenizer.from_artifact is not None
    check_teacher_tokenizer(ref, reused_tokenizer(tokenizer.from_artifact, store).key, given)
    config = teacher_config(ref)
    student = encoder_config(settings.student, config.vocab_size, config.pad_token_id)
    plan_student(settings, student, config, given)
    return ref, tokenizer


def teacher_identity(ref: ArtifactRef) -> str:
    """The weights' hash: the same teacher under another path or name keeps its students' keys."""
    return f"weights:{file_sha256(ref.path / WEIGHTS_FILE)[:20]}"


def teacher_config(ref: ArtifactRef) -> EncoderConfig:
    return load_encoder_config(ref.path)
