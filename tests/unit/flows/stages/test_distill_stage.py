"""The distill stage on real artifacts: a student is trained, exported, keyed by what shapes it,
reused when nothing changed, and refused before any work when the shapes cannot take the plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.core.settings import ConfigError
from flows.corpora import CorpusSettings, open_corpus
from flows.stages.distill import distill
from flows.stages.distill_plan import DistillSettings
from flows.stages.init_source import HUGGINGFACE_DIR
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import pretrain
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, train_tokenizer
from flows.stages.training_types import DistillOutputs, DistillStageSettings, PretrainSettings
from flows.training.settings import TrainerSettings
from tests.fakes import GREEK_LETTERS, greek_text, on_this_machine

TEACHER = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64}
STEPS = on_this_machine(
    TrainerSettings(max_steps=6, warmup_steps=1, batch_size=4, val_every_steps=3, log_every_steps=3)
)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> tuple[ArtifactStore, dict[str, Any]]:
    root = tmp_path_factory.mktemp("distill")
    (root / "text.txt").write_text(greek_text(400, words=GREEK_LETTERS[:8], length=(20, 21)))
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(root / "text.txt")]))
    store = ArtifactStore(root / "store")
    tokenizer = train_tokenizer(TokenizerSettings(vocab_size=100), corpus, store)
    shards = build_shards(ShardSettings(seq_len=32), corpus, tokenizer, store)
    settings = PretrainSettings(TEACHER, ObjectiveSettings(), STEPS, 0)
    pretrained = pretrain(settings, shards, tokenizer, store)
    return store, {"teacher": pretrained, "shards": shards, "tokenizer": tokenizer}


def run(store: ArtifactStore, refs: dict[str, ArtifactRef], **distill_settings: Any) -> ArtifactRef:
    values = {"student": {**TEACHER, "num_layers": 1}, **distill_settings}
    settings = DistillStageSettings(DistillSettings(**values), ObjectiveSettings(), STEPS, 0)
    return distill(settings, refs["teacher"], refs["shards"], refs["tokenizer"], store)


def test_a_student_is_distilled_exported_and_reused(teacher: Any) -> None:
    store, refs = teacher
    first = run(store, refs)
    outputs = DistillOutputs.of(first)
    assert outputs.student_init == "teacher" and outputs.layer_map == [1]
    assert outputs.parameters < outputs.teacher_parameters
    assert outputs.steps == STEPS.max_steps
    assert (first.path / HUGGINGFACE_DIR / "config.json").is_file()
    again = run(store, refs)
    assert again.cache_hit and again.key == first.key
    narrow = run(store, refs, student={**TEACHER, "num_layers": 1, "hidden_size": 16})
    assert DistillOutputs.of(narrow).student_init == "random"  # no shape to copy into
    assert run(store, refs, student_init="random", max_steps=2).key != first.key


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"layer_map": [0, 1]},
            r"distill\.layer_map=\[0, 1\] has 2 entries but the student "
            r"\(distill\.student\.num_layers\) has 1 layers",
        ),
        (
            {"layer_map": [5]},
            r"distill\.layer_map=\[5\] names teacher layer\(s\) \[5\], but the teacher .* has 2 "
            r"layers \(0\.\.1\)",
        ),
        (
            {"student_init": "teacher", "student": {**TEACHER, "num_layers": 1, "hidden_size": 16}},
            r"distill\.student_init=teacher copies teacher layers \[1\] into the student, but the "
            r"shapes differ: distill\.student\.hidden_size=16 \(teacher: 32\)",
        ),
        (
            {"student": {**TEACHER, "num_layers": 3}},
            r"distill\.student \(3 layers x 32, [\d,]+ parameters\) is larger than its teacher .* "
            r"set distill\.allow_larger_student=true",
        ),
        (
            {"attention_mse_weight": 1.0, "student": {**TEACHER, "num_layers": 1, "num_heads": 4}},
            r"distill\.attention_mse_weight=1\.0 matches attention maps head by head, but the "
            r"student has distill\.student\.num_heads=4 and the teacher .* 2",
        ),
    ],
    ids=["map length", "map range", "init shapes", "larger student", "attention heads"],
)
def test_shapes_that_cannot_take_the_plan_are_refused_before_training(
    teacher: Any, tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    _, refs = teacher
    store = ArtifactStore(tmp_path)
    with pytest.raises(ConfigError, match=message):
        run(store, refs, **settings)
    assert not (tmp_path / "distill").exists()  # nothing built, not even a work dir


def test_a_larger_student_is_distilled_when_explicitly_allowed(teacher: Any) -> None:
    store, refs = teacher
    ref = run(store, refs, student={**TEACHER, "num_layers": 3}, allow_larger_student=True)
    assert DistillOutputs.of(ref).parameters > DistillOutputs.of(ref).teacher_parameters


@pytest.mark.parametrize(
    ("precision", "teacher_bf16"), [("bf16-mixed", True), ("32-true", False), ("16-mixed", False)]
)
def test_the_teacher_runs_in_bf16_only_in_a_run_that_trains_in_bf16(
    precision: str, teacher_bf16: bool
) -> None:
    """Where `auto` resolved to 32-true, bf16 is emulated: a bf16 teacher would be the slowest
    part of the step (issue 41); in 16-mixed the teacher runs under the run's fp16 autocast."""
    settings = DistillSettings(student={**TEACHER, "num_layers": 1})
    assert settings.teacher_bf16
    assert settings.losses(precision).teacher_bf16 is teacher_bf16
