"""experiment=distilbert_smoke end to end (real Prefect, SQLite MLflow): teacher pretrain ->
distill -> finetune with three arms; the student exported and registered; then the same student
distilled from the teacher's registry alias, as the `distill` deployment does, is a cache hit."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from flows.resolve import resolve_run
from lightning_modules.models.serialization import load_masked_lm
from tests.fakes import logits_match

pytestmark = pytest.mark.slow

SMALLER = [
    "experiment=distilbert_smoke",
    "corpus.max_documents=800",
    "trainer.max_steps=30",
    "trainer.val_every_steps=15",
    "finetune.train_examples=200",
    "distill.registered_model=cloze-student",
]


def run_pipeline(root: Path, *overrides: str) -> dict[str, Any]:
    from flows.pipeline import pretraining_pipeline

    run = resolve_run([*SMALLER, f"paths.root={root}", *overrides])
    return pretraining_pipeline(run)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("distill-pipeline")


@pytest.fixture(scope="module")
def first(root: Path) -> dict[str, Any]:
    return run_pipeline(root)


def test_the_student_is_distilled_and_evaluated_beside_teacher_and_random_init(
    first: dict[str, Any],
) -> None:
    stages = first["stages"]
    assert list(stages) == ["tokenizer", "shards", "pretrain", "distill", "finetune"]
    distilled = stages["distill"]
    assert distilled["student_init"] == "teacher" and distilled["layer_map"] == [1]
    assert distilled["parameters"] < distilled["teacher_parameters"]
    fine = stages["finetune"]
    for key in ("student_accuracy_mean", "student_lift_accuracy", "student_minus_teacher_accuracy"):
        assert f"pydoc_topics.{key}" in fine
    assert fine["distill.student_parameters"] < fine["distill.teacher_parameters"]
    # both inference speeds measured in this run, and the reported speed-up is their ratio (a
    # figure, not a claim that the student is faster: no speed is asserted on a shared CPU)
    teacher_speed = fine["distill.teacher_tokens_per_second"]
    student_speed = fine["distill.student_tokens_per_second"]
    assert math.isfinite(teacher_speed) and teacher_speed > 0
    assert math.isfinite(student_speed) and student_speed > 0
    assert fine["distill.speedup"] == pytest.approx(student_speed / teacher_speed)
    assert fine["distill.parameter_ratio"] == pytest.approx(
        fine["distill.student_parameters"] / fine["distill.teacher_parameters"]
    )
    summary = (Path(fine["path"]) / "summary.md").read_text()
    assert f"({fine['distill.speedup']:.2f}x)" in summary
    assert "| task | metric | teacher | student | random init |" in summary


def test_the_student_is_exported_for_transformers_and_registered(
    root: Path, first: dict[str, Any]
) -> None:
    from transformers import AutoModelForMaskedLM

    student_dir = Path(first["stages"]["distill"]["path"])
    ours = load_masked_lm(student_dir).eval()
    theirs = AutoModelForMaskedLM.from_pretrained(student_dir / "huggingface").eval()
    assert logits_match(
        lambda ids, mask: ours.head(ours.encoder(ids, mask)), theirs, ours.config.vocab_size
    )
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    versions = client.search_model_versions("name='cloze-student'")
    assert [version.tags["cloze.artifact_path"] for version in versions] == [str(student_dir)]


def test_distilling_from_the_teachers_registry_alias_reuses_the_same_student(
    root: Path, first: dict[str, Any]
) -> None:
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    (version,) = client.search_model_versions("name='cloze-encoder'")
    client.set_registered_model_alias("cloze-encoder", "champion", version.version)
    again = run_pipeline(root, "distill.teacher=models:/cloze-encoder@champion")["stages"]
    assert again["pretrain"]["key"] == first["stages"]["pretrain"]["key"]  # not retrained
    assert again["tokenizer"]["key"] == first["stages"]["tokenizer"]["key"]  # the teacher's
    assert again["distill"]["cache_hit"]
    assert again["distill"]["key"] == first["stages"]["distill"]["key"]


def test_a_transformers_checkpoint_is_imported_as_the_teacher(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """DistilBERT's recipe: the teacher is a public checkpoint, imported with its tokenizer;
    no pretraining runs, and the student is scored beside it."""
    from tests.checkpoint_tokenizers import write_tokenizer
    from tests.checkpoints import tiny_checkpoint

    root = tmp_path_factory.mktemp("checkpoint-teacher")
    folder = root / "bert-teacher"
    tiny_checkpoint("bert", folder, vocab_size=write_tokenizer(folder, "wordpiece"), scale=0.0)
    student = [f"distill.student.{key}" for key in ("hidden_size=32", "intermediate_size=16")]
    student.append("distill.student.max_position_embeddings=64")
    stages = run_pipeline(root, f"distill.teacher={folder}", *student)["stages"]
    assert list(stages) == ["tokenizer", "shards", "pretrain", "distill", "finetune"]
    assert stages["pretrain"]["path"].startswith(str(root / "artifacts" / "checkpoint"))
    assert stages["tokenizer"]["vocab_size"] == json_vocab(folder)
    assert stages["distill"]["parameters"] < stages["distill"]["teacher_parameters"]
    assert "pydoc_topics.student_accuracy_mean" in stages["finetune"]


def json_vocab(folder: Path) -> int:
    import json

    return int(json.loads((folder / "config.json").read_text())["vocab_size"])
