"""Continuing a public checkpoint, end to end: BERT and RoBERTa folders built offline go through
the real pipeline (local Prefect, SQLite MLflow) with their tokenizers, keep their logits through
a near-zero-rate step and the export, and the report adds the `base` arm: what continuing bought.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient

from flows.resolve import resolve_run
from flows.stages import init_point
from flows.summary import render_summary
from tests.checkpoint_tokenizers import write_tokenizer
from tests.checkpoints import tiny_checkpoint
from tests.fakes import logits_match

# A tiny smoke run: two optimizer steps at a rate too small to move a weight, two seeds.
TINY = [
    "experiment=smoke",
    "corpus.max_documents=300",
    "trainer.max_steps=2",
    "trainer.warmup_steps=1",
    "trainer.val_every_steps=2",
    "trainer.learning_rate=1e-12",
    "finetune.seeds=2",
    "finetune.train_examples=60",
    "finetune.validation_examples=60",
]
FAMILIES = {"bert": ("wordpiece", "BertForMaskedLM"), "roberta": ("bpe", "RobertaForMaskedLM")}


def checkpoint_folder(root: Path, model_type: str) -> Path:
    """A tiny random `model_type` checkpoint with a tokenizer of the same vocabulary."""
    folder = root / f"{model_type}-tiny"
    size = write_tokenizer(folder, FAMILIES[model_type][0])
    return tiny_checkpoint(model_type, folder, vocab_size=size, scale=0.5)


def run_pipeline(root: Path, *overrides: str) -> dict[str, Any]:
    from flows.pipeline import pretraining_pipeline

    run = resolve_run([*TINY, f"paths.root={root}", *overrides])
    return pretraining_pipeline(run)  # type: ignore[no-any-return]


# BERT in the fast suite; RoBERTa (a second full pipeline, about as long) with the slow checks.
@pytest.fixture(scope="module", params=["bert", pytest.param("roberta", marks=pytest.mark.slow)])
def continued(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    model_type = request.param
    root = tmp_path_factory.mktemp(model_type)
    folder = checkpoint_folder(root, model_type)
    reads: list[Path] = []  # each directory whose lineage.json the run read
    with pytest.MonkeyPatch.context() as patch:
        real = init_point.read_lineage

        def read_lineage(directory: Path) -> dict[str, Any] | None:
            reads.append(directory)
            return real(directory)

        patch.setattr(init_point, "read_lineage", read_lineage)
        summary = run_pipeline(root, f"pretrain.init_from={folder}")
    return model_type, root, folder, summary, reads


def test_the_tokenizer_is_imported_and_the_checkpoint_is_a_stage(continued: Any) -> None:
    model_type, _, folder, summary, _ = continued
    stages = summary["stages"]
    assert stages["tokenizer"]["imported_from"] == folder.name
    assert stages["checkpoint"]["model_type"] == model_type
    assert stages["checkpoint"]["architecture"] == FAMILIES[model_type][1]
    text = render_summary(summary)
    assert f"tokenizer  [imported] {folder.name}" in text
    assert f"checkpoint [imported] {folder.name}: {FAMILIES[model_type][1]}" in text


def test_the_logits_survive_a_near_zero_step_and_the_export(continued: Any) -> None:
    """The continued model, exported as the checkpoint's own class, computes what the original
    did: a mapping error anywhere on the way in or out would show at these weight scales."""
    from transformers import AutoModelForMaskedLM

    model_type, _, folder, summary, _ = continued
    exported = Path(summary["stages"]["pretrain"]["path"]) / "huggingface"
    theirs = AutoModelForMaskedLM.from_pretrained(exported).eval()
    assert type(theirs).__name__ == FAMILIES[model_type][1]
    original = AutoModelForMaskedLM.from_pretrained(folder).eval()
    vocab = original.config.vocab_size
    torch.manual_seed(0)
    assert logits_match(
        lambda ids, mask: theirs(input_ids=ids, attention_mask=mask).logits, original, vocab
    )


def test_the_report_adds_the_base_arm_and_what_continuing_bought(continued: Any) -> None:
    _, _, _, summary, _ = continued
    finetune = summary["stages"]["finetune"]
    for key in (
        "pydoc_topics.base_accuracy_mean",
        "pydoc_topics.over_base_accuracy",
        "pydoc_topics.over_base_accuracy_ci_low",
        "pydoc_topics.over_base_accuracy_bootstrap_high",
    ):
        assert key in finetune, key
    difference = (
        finetune["pydoc_topics.pretrained_accuracy_mean"]
        - finetune["pydoc_topics.base_accuracy_mean"]
    )
    assert finetune["pydoc_topics.over_base_accuracy"] == pytest.approx(difference)
    text = render_summary(summary)
    assert "adapted over base" in text
    assert "CI paired t over seeds [" in text


def test_the_lineage_is_in_the_run_params_and_the_registry(continued: Any) -> None:
    model_type, root, folder, summary, _ = continued
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    parent = summary["mlflow_run_id"]
    experiment = client.get_experiment_by_name("cloze")
    children = client.search_runs(
        [experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent}'"
    )
    pretrain = next(run for run in children if run.data.tags.get("cloze.stage") == "pretrain")
    assert pretrain.data.params["base_checkpoint.model_type"] == model_type
    assert pretrain.data.params["base_checkpoint.name"] == folder.name
    weights_sha256 = pretrain.data.params["base_checkpoint.weights_sha256"]
    assert len(weights_sha256) == 64
    name, version = pretrain.data.tags["cloze.registered_model"].split("/")
    description = client.get_model_version(name, version).description
    assert f"continued from the {model_type} checkpoint {folder.name} " in description
    assert f"weights sha256 {weights_sha256[:16]}" in description


def test_the_run_reads_the_lineage_once_where_the_checkpoint_is_imported(continued: Any) -> None:
    """The starting point carries the lineage from the import on: the pretrain run's params,
    the model's shape, the export as the checkpoint's class and the registry's description all
    read it from there, not from lineage.json again."""
    _, _, _, summary, reads = continued
    assert reads == [Path(summary["stages"]["checkpoint"]["path"])]


def test_a_second_adaptation_reuses_the_import_and_the_base_arm(continued: Any) -> None:
    """Other continued pretraining of the same checkpoint pairs with the same base runs."""
    _, root, folder, summary, _ = continued
    again = run_pipeline(root, f"pretrain.init_from={folder}", "trainer.max_steps=3")
    assert again["stages"]["checkpoint"]["cache_hit"]
    assert again["stages"]["pretrain"]["key"] != summary["stages"]["pretrain"]["key"]
    published = [p for p in (root / "artifacts" / "finetune_base").iterdir() if p.name[0] != "."]
    assert len(published) == 1  # one task, fitted once
    first, second = summary["stages"]["finetune"], again["stages"]["finetune"]
    assert second["pydoc_topics.base_accuracy_mean"] == first["pydoc_topics.base_accuracy_mean"]
