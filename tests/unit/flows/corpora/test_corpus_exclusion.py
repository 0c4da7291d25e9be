"""`corpus.exclude_validation_of`: a corpus that pretrains on a task's own text keeps that task's
validation examples out, so choices made on validation are not made on text the model has read."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from flows.core.artifacts import ArtifactStore
from flows.core.config import compose_config
from flows.corpora.excluded import ExcludedTexts
from flows.downstream.tasks.load import load_task
from flows.plan import PipelinePlan
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, train_tokenizer

VALIDATION = ["a smart film , and a fine one", "the plot never lands"]


@pytest.mark.parametrize(
    ("document", "excluded"),
    [
        ("a smart film , and a fine one", True),  # the validation sentence itself
        ("A  Smart film , and a FINE one", True),  # case and spacing do not hide a copy
        ("smart film , and a fine", True),  # a phrase of it (SST's parse-tree rows)
        ("critics said the plot never lands at all", True),  # a text that quotes it
        ("a smart", True),
        ("art film", False),  # "art" is not the word "a" ... "smart"
        ("a fine film , and a smart one", False),  # the same words in another order
        ("an unrelated review of another movie", False),
    ],
)
def test_a_document_goes_when_it_holds_or_is_part_of_a_validation_text(
    document: str, excluded: bool
) -> None:
    assert ExcludedTexts.of(["t"], VALIDATION).matches(document) is excluded


def test_the_fingerprint_names_the_tasks_and_changes_with_the_texts() -> None:
    one = ExcludedTexts.of(["t"], VALIDATION)
    assert one.fingerprint()["tasks"] == ["t"]
    assert one.fingerprint()["texts"] == 2
    assert (
        one.fingerprint()
        == ExcludedTexts.of(["t"], [" the plot NEVER lands", *VALIDATION]).fingerprint()
    )
    assert one.fingerprint() != ExcludedTexts.of(["t"], VALIDATION[:1]).fingerprint()


def write_task_text(directory: Path) -> Path:
    """A GLUE-style train file of whole sentences and phrases of them, SST-like."""
    rng = random.Random(0)
    words = [f"w{index}" for index in range(300)]
    rows = []
    for _ in range(60):
        sentence = " ".join(rng.sample(words, 12))
        rows += [sentence, " ".join(sentence.split()[2:9])]
    path = directory / "train.tsv"
    path.write_text(
        "sentence\tlabel\n" + "".join(f"{row}\t{n % 2}\n" for n, row in enumerate(rows))
    )
    return path


def plan_for(directory: Path, *overrides: str) -> PipelinePlan:
    task = (
        f"{{format:glue,labels:['0','1'],train:{directory}/train.tsv,test:{directory}/train.tsv}}"
    )
    return PipelinePlan.from_config(
        compose_config(
            [
                "corpus=files",
                f"corpus.paths=[{directory}/train.tsv]",
                "corpus.format=tsv",
                "corpus.text_field=sentence",
                f"+finetune.catalog.t={task}",
                "finetune.tasks=[t]",
                "+finetune.catalog.t.drop_contained_rows=true",
                *overrides,
            ]
        )
    )


def test_the_corpus_holds_none_of_the_validation_split_the_finetune_stage_will_choose_on(
    tmp_path: Path,
) -> None:
    write_task_text(tmp_path)
    plan = plan_for(tmp_path, "corpus.exclude_validation_of=[t]")
    spec = plan.finetune.specs()[0]
    sampling = plan.finetune.task(spec).recipe.sampling(plan.pretrain.seed)
    validation = [
        example.text for example in load_task(spec, tmp_path, sampling).splits["validation"]
    ]
    assert validation

    corpus = plan.open_corpus()
    documents = list(corpus.documents())
    everything = list(plan_for(tmp_path).open_corpus().documents())

    assert not [doc for doc in documents if any(doc in text or text in doc for text in validation)]
    dropped = [doc for doc in everything if doc not in documents]
    assert all(any(doc in text for text in validation) for doc in dropped)
    assert corpus.stats.dropped_task_validation == len(dropped) >= 2 * len(validation)


def test_excluding_moves_the_corpus_key_and_an_empty_list_keeps_it(tmp_path: Path) -> None:
    write_task_text(tmp_path)
    plain = plan_for(tmp_path).open_corpus().fingerprint()
    assert "excluded" not in plain
    assert (
        plan_for(tmp_path, "corpus.exclude_validation_of=[]").open_corpus().fingerprint() == plain
    )
    assert (
        plan_for(tmp_path, "corpus.exclude_validation_of=[t]").open_corpus().fingerprint() != plain
    )


def test_sharding_workers_drop_the_same_documents_and_count_them(tmp_path: Path) -> None:
    write_task_text(tmp_path)
    corpus = plan_for(
        tmp_path, "corpus.exclude_validation_of=[t]", "corpus.min_words=1"
    ).open_corpus()
    store = ArtifactStore(tmp_path / "store")
    tokenizer = train_tokenizer(TokenizerSettings(vocab_size=400), corpus, store)
    kept = corpus.stats.documents
    shards = build_shards(ShardSettings(seq_len=32, num_workers=2), corpus, tokenizer, store)
    dropped = shards.outputs["corpus_dropped_task_validation"]
    assert dropped == corpus.stats.dropped_task_validation > 0
    assert shards.outputs["corpus_documents"] == kept
