"""Downstream task readers, metrics, sub-word alignment and the lift's interval, on known cases."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from sklearn.metrics import f1_score
from sklearn.metrics import matthews_corrcoef as sklearn_mcc
from tokenizers import Tokenizer, models, pre_tokenizers

from flows.core.config import compose_config
from flows.core.settings import ConfigError, settings_from
from flows.downstream.finetuning.recipe import pad_batch
from flows.downstream.kinds.registry import kind_of
from flows.downstream.settings import FinetuneSettings
from flows.downstream.statistics.report import paired_figures, paired_interval
from flows.downstream.tasks.encoding import encode
from flows.downstream.tasks.load import Sampling, load_task
from flows.downstream.tasks.readers import (
    LabelIndex,
    TaggedSentence,
    TextExample,
    read_conll,
    read_glue,
)
from flows.downstream.tasks.spec import TaskSpec, default_data_dir
from lightning_modules.label_metrics import entity_scores, entity_spans
from lightning_modules.metrics import binary_f1, matthews_corrcoef

DATA = default_data_dir()
needs_data = pytest.mark.skipif(not (DATA / "glue").is_dir(), reason=f"no shared data at {DATA}")
ALL = Sampling(None, None, seed=0)


def preset(name: str, *overrides: str) -> FinetuneSettings:
    config = compose_config([f"finetune={name}", *overrides])
    return settings_from(FinetuneSettings, config["finetune"], "finetune")


def spec_of(name: str) -> TaskSpec:
    return preset(name).specs()[0]


@needs_data
@pytest.mark.parametrize(
    ("task", "train", "test", "first_test"),
    [
        # Counts from the data's PROVENANCE.txt; train keeps 90% after carving validation.
        ("sst2", 67_349, 872, ("it 's a charming and often affecting journey .", None, 1)),
        ("cola", 8_551, 1_043, ("The sailors rode the breeze clear of the rocks.", None, 1)),
        ("rte", 2_490, 277, ("Dana Reeve, the widow of", "Christopher Reeve had an accident.", 0)),
        ("mrpc", 3_667, 408, ("He said the foodservice pie", '" The foodservice pie business', 1)),
    ],
)
def test_glue_presets_read_the_real_files(
    task: str, train: int, test: int, first_test: tuple[str, str | None, int]
) -> None:
    data = load_task(spec_of(task), DATA, ALL)
    carved = round(0.1 * train)
    assert len(data.splits["test"]) == test
    assert len(data.splits["validation"]) == carved
    assert len(data.splits["train"]) == train - carved
    first = data.splits["test"][0]
    text, pair, label = first_test
    assert first.text.startswith(text) and first.label == label
    assert (first.pair is None) == (pair is None)
    if pair is not None:
        assert first.pair.startswith(pair)


@needs_data
def test_ncbi_disease_reads_sentences_and_mentions_as_the_provenance_counts() -> None:
    data = load_task(spec_of("ncbi_disease"), DATA, ALL)
    sizes = {split: len(sentences) for split, sentences in data.splits.items()}
    assert sizes == {"train": 5_424, "validation": 923, "test": 940}
    b_disease = data.labels.index("B-Disease")
    mentions = sum(sentence.tags.count(b_disease) for sentence in data.splits["test"])
    assert mentions == 960


def test_carved_validation_is_seeded_disjoint_and_capped(tmp_path: Path) -> None:
    rows = "".join(f"sentence number {i}\t{i % 2}\n" for i in range(200))
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + rows)
    spec = TaskSpec(
        name="t",
        format="glue",
        labels=["0", "1"],
        train=str(tmp_path / "train.tsv"),
        test="train.tsv",
    )
    first = load_task(spec, tmp_path, Sampling(15, None, seed=3))
    again = load_task(spec, tmp_path, Sampling(15, None, seed=3))
    other = load_task(spec, tmp_path, Sampling(15, None, seed=4))
    validation = {e.text for e in first.splits["validation"]}
    train = {e.text for e in first.splits["train"]}
    assert len(validation) == 15 and len(train) == 185
    assert not validation & train
    assert first.splits == again.splits
    assert {e.text for e in other.splits["validation"]} != validation


def test_glue_reader_handles_bom_pairs_and_positions(tmp_path: Path) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_bytes('\ufeffQuality\tA\tB\n1\tx "quoted\ty\n0\tp\tq\n'.encode())
    spec = TaskSpec(
        name="p", format="glue", labels=["0", "1"], train="a", test="b",
        text_column="A", pair_column="B", label_column="Quality",
    )  # fmt: skip
    assert read_glue(path, spec, LabelIndex(spec, ["0", "1"])) == [
        TextExample('x "quoted', "y", 1),
        TextExample("p", "q", 0),
    ]
    (tmp_path / "cola.tsv").write_text("src\t0\t*\tBad sentence.\n")
    no_header = TaskSpec(
        name="c", format="glue", labels=["0", "1"], train="a", test="b",
        header=False, text_column=3, label_column=1,
    )  # fmt: skip
    assert read_glue(tmp_path / "cola.tsv", no_header, LabelIndex(no_header, ["0", "1"])) == [
        TextExample("Bad sentence.", None, 0)
    ]


def test_conll_reader_splits_sentences_on_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "ner.tsv"
    path.write_text("A\tO\nfever\tB-Disease\n\n\nbad\tB-Disease\ncough\tI-Disease\n")
    spec = TaskSpec(
        name="n", format="conll", kind="token_classification", metric="entity_f1",
        labels=["O", "B-Disease", "I-Disease"], train="a", test="b",
    )  # fmt: skip
    assert read_conll(path, spec, LabelIndex(spec, ["O", "B-Disease", "I-Disease"])) == [
        TaggedSentence(("A", "fever"), (0, 1)),
        TaggedSentence(("bad", "cough"), (1, 2)),
    ]


@pytest.mark.parametrize(
    ("tags", "spans"),
    [
        (["B-D", "I-D", "O", "B-D"], {("D", 0, 2), ("D", 3, 4)}),
        (["I-D", "I-D", "O"], {("D", 0, 2)}),  # I- without B- starts an entity
        (["O", "I-D", "B-D", "I-D"], {("D", 1, 2), ("D", 2, 4)}),
        (["B-C", "I-D", "I-D"], {("C", 0, 1), ("D", 1, 3)}),  # a type change splits
        (["B-D", "B-D"], {("D", 0, 1), ("D", 1, 2)}),
        (["B-D", "O", "I-D"], {("D", 0, 1), ("D", 2, 3)}),
        (["O", "O"], set()),
    ],
)
def test_entity_spans_follow_seqeval(tags: list[str], spans: set[tuple[str, int, int]]) -> None:
    assert entity_spans(tags) == spans


def test_entity_scores_need_exact_span_and_type() -> None:
    gold = [["B-D", "I-D", "O", "B-C"], ["O", "B-D"]]
    # sentence 1: first entity too short (miss), chemical right; sentence 2: right type, exact.
    predicted = [["B-D", "O", "O", "B-C"], ["O", "B-D"]]
    scores = entity_scores(gold, predicted)
    assert scores == pytest.approx(
        {"entity_precision": 2 / 3, "entity_recall": 2 / 3, "entity_f1": 2 / 3}
    )
    wrong_type = entity_scores([["B-D"]], [["B-C"]])
    assert wrong_type == {"entity_precision": 0.0, "entity_recall": 0.0, "entity_f1": 0.0}
    assert entity_scores([["O"]], [["O"]])["entity_f1"] == 0.0


def test_mcc_and_binary_f1_match_scikit_learn() -> None:
    generator = torch.Generator().manual_seed(0)
    for num_labels in (2, 3):
        labels = torch.randint(0, num_labels, (200,), generator=generator)
        noise = torch.randint(0, num_labels, (200,), generator=generator)
        predictions = torch.where(torch.rand(200, generator=generator) < 0.6, labels, noise)
        assert matthews_corrcoef(predictions, labels, num_labels) == pytest.approx(
            sklearn_mcc(labels.numpy(), predictions.numpy())
        )
    assert binary_f1(predictions.clamp(max=1), labels.clamp(max=1)) == pytest.approx(
        f1_score(labels.clamp(max=1).numpy(), predictions.clamp(max=1).numpy())
    )
    constant = torch.ones(10, dtype=torch.long)
    assert matthews_corrcoef(constant, torch.arange(10) % 2, 2) == 0.0


def word_piece() -> Tokenizer:
    vocab = {"[PAD]": 0, "[UNK]": 1, "fe": 2, "##ver": 3, "a": 4, "cough": 5, "##ing": 6}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def test_ner_labels_the_first_sub_token_and_scores_words() -> None:
    sentence = TaggedSentence(("a", "fever", "coughing"), (0, 1, 2))
    split = encode(word_piece(), [sentence], token_types=True)
    item = split[0]
    assert item["input_ids"] == [4, 2, 3, 5, 6]
    assert item["labels"] == [0, 1, -100, 2, -100]
    batch = pad_batch([item, encode(word_piece(), [TaggedSentence(("a",), (0,))], True)[0]], 0)
    assert batch["labels"][1].tolist() == [0, -100, -100, -100, -100]
    assert batch["attention_mask"][1].tolist() == [True, False, False, False, False]
    labels = ["O", "B-Disease", "I-Disease"]
    # A truncated prediction (two words of three) counts the missing word as O: right when the
    # word was O, a shortened (so wrong) span when it continued an entity.
    tagging = kind_of("token_classification")
    assert tagging.score([[0, 1, 0]], [[0, 1]], labels, None)["entity_f1"] == 1.0
    assert tagging.score(split.gold, [[0, 1]], labels, None)["entity_recall"] == 0.0


def test_pairs_get_segment_ids_unless_the_encoder_has_none() -> None:
    from tokenizers import processors

    tokenizer = word_piece()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[PAD] $A", pair="[PAD] $A $B:1", special_tokens=[("[PAD]", 0)]
    )
    example = TextExample("a fever", "cough", 1)
    assert encode(tokenizer, [example], True)[0]["token_type_ids"] == [0, 0, 0, 0, 1]
    assert encode(tokenizer, [example], False)[0]["token_type_ids"] == [0, 0, 0, 0, 0]


def test_paired_t_interval_by_hand() -> None:
    # differences 0.1, 0.2, 0.3: mean 0.2, sd 0.1, t(0.975, 2) = 4.3027
    low, high = paired_interval([0.1, 0.2, 0.3], 0.95) or (0.0, 0.0)
    half = 4.302653 * 0.1 / 3**0.5
    assert (low, high) == pytest.approx((0.2 - half, 0.2 + half), abs=1e-6)
    assert paired_interval([0.1], 0.95) is None


def test_paired_figures_name_the_mean_and_its_interval_and_omit_it_for_one_pair() -> None:
    figures = paired_figures([0.1, 0.2, 0.3], 0.95, "t.gain")
    assert figures["t.gain"] == pytest.approx(0.2)
    assert (figures["t.gain_ci_low"], figures["t.gain_ci_high"]) == paired_interval(
        [0.1, 0.2, 0.3], 0.95
    )
    assert paired_figures([0.1], 0.95, "t.gain") == {"t.gain": pytest.approx(0.1)}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["finetune.tasks=[mnli]"], r"finetune\.tasks: 'mnli' is not in finetune\.catalog"),
        (["finetune.learning_rates=[]"], r"finetune\.learning_rates=\[\] must be a non-empty"),
        (["finetune.seeds=0"], r"finetune\.seeds=0 must be at least 1"),
        (["finetune.catalog.cola.metric=entity_f1"], r"finetune\.catalog\.cola\.metric="),
        (["finetune.catalog.rte.labels=[x]"], r"finetune\.catalog\.rte\.labels must list at"),
    ],
)
def test_bad_finetune_config_names_the_key(overrides: list[str], message: str) -> None:
    tasks = ["finetune.tasks=[cola,rte]"] if "tasks" not in overrides[0] else []
    with pytest.raises(ConfigError, match=message):
        preset("catalog", *tasks, *overrides)


def test_several_tasks_and_a_user_task_compose_from_overrides(tmp_path: Path) -> None:
    settings = preset(
        "sst2",
        "finetune.tasks=[sst2,ncbi_disease,mine]",
        "+finetune.catalog.mine={format: glue, labels: [no, yes], train: /x.tsv, test: /y.tsv}",
    )
    assert [spec.name for spec in settings.specs()] == ["sst2", "ncbi_disease", "mine"]
    assert settings.specs()[2].source("train", tmp_path) == Path("/x.tsv")


def test_a_datasets_folder_reads_class_labels_by_name(tmp_path: Path) -> None:
    import datasets

    features = datasets.Features(
        {"s": datasets.Value("string"), "y": datasets.ClassLabel(names=["neg", "pos"])}
    )
    rows = {"s": ["good film", "bad film"], "y": [1, 0]}
    datasets.DatasetDict(
        {split: datasets.Dataset.from_dict(rows, features=features) for split in ("tr", "te")}
    ).save_to_disk(str(tmp_path / "hub"))
    spec = TaskSpec(
        name="h", format="huggingface", labels=["neg", "pos"], train="tr", test="te",
        hub_name=str(tmp_path / "hub"), text_column="s", label_column="y",
    )  # fmt: skip
    data = load_task(spec, tmp_path, ALL)
    assert data.splits["test"] == [
        TextExample("good film", None, 1),
        TextExample("bad film", None, 0),
    ]
    assert len(data.splits["train"]) == 1 and len(data.splits["validation"]) == 1
