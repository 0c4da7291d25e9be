"""Multi-label classification (flows/downstream/kinds/multi_label.py): a label set per example,
read from JSON lines or a CSV column of separated names, cut at per-label thresholds chosen on
validation, scored on micro- and macro-F1 as sklearn scores them, with bootstrap units that give
those figures exactly, per-label figures, a per-label majority baseline and a one-vs-rest TF-IDF
one."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sklearn.metrics import f1_score
from sklearn.preprocessing import MultiLabelBinarizer

from flows.downstream.kinds.classification import C_GRID
from flows.downstream.kinds.registry import kind_of
from flows.downstream.tasks.load import Sampling, load_task
from flows.downstream.tasks.readers import LabelSetExample
from flows.downstream.tasks.spec import TaskSpec

LABELS = ["cough", "fever", "flu", "gout"]
MULTI_LABEL = kind_of("multi_label")
SPEC = TaskSpec(name="m", format="jsonl", kind="multi_label", labels=LABELS, train="x", test="y")


def random_sets(rng: random.Random, count: int) -> list[list[int]]:
    return [sorted(rng.sample(range(len(LABELS)), rng.randrange(0, 3))) for _ in range(count)]


def test_micro_and_macro_f1_are_sklearns_and_the_bootstrap_units_give_them_exactly() -> None:
    rng = random.Random(0)
    gold = random_sets(rng, 200)
    predicted = [g if rng.random() < 0.5 else random_sets(rng, 1)[0] for g in gold]
    scores = MULTI_LABEL.score(gold, predicted, LABELS, None)
    binary = MultiLabelBinarizer(classes=range(len(LABELS)))
    truth, guess = binary.fit_transform(gold), binary.transform(predicted)
    for metric in ("micro_f1", "macro_f1"):
        expected = f1_score(truth, guess, average=metric.split("_")[0])
        assert scores[metric] == pytest.approx(expected)
        totals = MULTI_LABEL.example_statistics(gold, predicted, LABELS).sum(0, keepdims=True)
        found = MULTI_LABEL.bootstrap_metric(metric, totals, LABELS, None)[0]
        assert found == pytest.approx(scores[metric])


def test_per_label_figures_count_each_label_of_each_example() -> None:
    report = MULTI_LABEL.per_class([[0, 1], [1], []], [[0], [1, 2], [3]], LABELS)
    assert report["cough"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}
    assert report["fever"] == {"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "support": 2}
    assert report["flu"]["support"] == 0 and report["flu"]["precision"] == 0.0


def test_the_majority_baseline_predicts_each_label_most_train_examples_carry() -> None:
    train = [LabelSetExample("t", None, labels) for labels in ((1,), (1, 2), (1, 3), (0,))]
    test = [LabelSetExample("t", None, ()) for _ in range(3)]
    predictions, _ = MULTI_LABEL.fit_baseline(
        "majority", SPEC, LABELS, {"train": train, "test": test}
    )
    assert predictions == [[1], [1], [1]]  # fever: 3 of 4; every other label: at most 1


def test_a_jsonl_task_reads_a_label_list_per_record_and_takes_auto_labels_from_train(
    tmp_path: Path,
) -> None:
    rows = [
        {"note": "fever and cough", "codes": ["fever", "cough"]},
        {"note": "a quiet day", "codes": []},
        {"note": "gout again", "codes": ["gout", "gout"]},
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = TaskSpec(
        name="m",
        format="jsonl",
        kind="multi_label",
        labels="auto",
        text_column="note",
        label_column="codes",
        train="m.jsonl",
        validation="m.jsonl",
        test="m.jsonl",
    )
    assert spec.metric == "micro_f1"  # the kind's first metric, unless told
    data = load_task(spec, tmp_path, Sampling(None, None, 0))
    assert data.labels == ["cough", "fever", "gout"]
    assert [example.labels for example in data.splits["test"]] == [(0, 1), (), (2,)]


def test_a_labels_threshold_moves_where_validation_calls_for_it_and_test_never_sets_it() -> None:
    """flu's validation probabilities sit under 0.5 (a rare label the head is shy of): its F1 is
    best cut at 0.3 (0.2 as good, 0.3 nearer 0.5), so test is cut there too, where 0.5 would
    predict flu nowhere; cough, apart at 0.5, keeps it. Test's own probabilities choose nothing."""
    validation = [[0.9, 0.35], [0.8, 0.1], [0.1, 0.4], [0.2, 0.05]]
    gold = [[0, 1], [0], [1], []]
    test = [[0.7, 0.32], [0.3, 0.45], [0.6, 0.25]]
    decided = MULTI_LABEL.decide(test, lambda: validation, gold, ["cough", "flu"])
    assert decided.thresholds == [0.5, 0.3]
    assert decided.predictions == [[0, 1], [1], [0]]
    elsewhere = [[0.7, 0.32], [0.3, 0.45], [0.6, 0.95]]  # another test split: the same cuts
    assert MULTI_LABEL.decide(elsewhere, lambda: validation, gold, ["cough", "flu"]).thresholds == [
        0.5,
        0.3,
    ]


def test_a_label_that_validation_never_shows_keeps_one_half() -> None:
    """Every threshold scores a label absent from validation alike: the tie goes to 0.5."""
    decided = MULTI_LABEL.decide(
        [[0.45, 0.55]], lambda: [[0.2, 0.6], [0.3, 0.1]], [[1], []], LABELS[:2]
    )
    assert decided.thresholds == [0.5, 0.5]
    assert decided.predictions == [[1]]


def word_examples(rng: random.Random, count: int) -> list[LabelSetExample]:
    """Notes of filler words and the names of their labels, none to two of them."""
    filler = ["patient", "seen", "today", "reports", "mild", "since", "week", "clinic"]
    examples = []
    for labels in random_sets(rng, count):
        words = [rng.choice(filler) for _ in range(5)] + [LABELS[label] for label in labels]
        rng.shuffle(words)
        examples.append(LabelSetExample(" ".join(words), None, tuple(labels)))
    return examples


def test_the_tfidf_baseline_is_one_vs_rest_with_c_and_each_threshold_chosen_on_validation() -> None:
    rng = random.Random(1)
    splits = {name: word_examples(rng, 60) for name in ("train", "validation", "test")}
    predictions, choices = MULTI_LABEL.fit_baseline("tfidf_logreg", SPEC, LABELS, splits)
    gold = [sorted(example.labels) for example in splits["test"]]
    assert MULTI_LABEL.score(gold, predictions, LABELS, None)["micro_f1"] > 0.9
    assert choices["C"] in C_GRID
    assert set(choices) == {"C", *(f"threshold {label}" for label in LABELS)}


def test_a_csv_task_reads_each_rows_label_names_from_one_column_split_on_its_separator(
    tmp_path: Path,
) -> None:
    """An empty cell is an example without a label; a quoted cell may hold the CSV's commas."""
    (tmp_path / "m.csv").write_text(
        'note,codes\n"fever, then cough",fever|cough\na quiet day,\ngout again,gout| gout\n'
    )
    spec = TaskSpec(
        name="m",
        format="csv",
        kind="multi_label",
        labels="auto",
        text_column="note",
        label_column="codes",
        label_separator="|",
        train="m.csv",
        validation="m.csv",
        test="m.csv",
    )
    data = load_task(spec, tmp_path, Sampling(None, None, 0))
    assert data.labels == ["cough", "fever", "gout"]
    assert [example.labels for example in data.splits["test"]] == [(0, 1), (), (2,)]
    assert data.splits["test"][0].text == "fever, then cough"


def test_a_datasets_folder_reads_a_list_of_class_labels_per_row_by_name(tmp_path: Path) -> None:
    import datasets

    features = datasets.Features(
        {
            "note": datasets.Value("string"),
            "codes": datasets.Sequence(datasets.ClassLabel(names=["cough", "fever"])),
        }
    )
    rows = {"note": ["fever and cough", "a quiet day"], "codes": [[1, 0], []]}
    rows = {column: values * 5 for column, values in rows.items()}
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "hub"))
    spec = TaskSpec(
        name="m",
        format="huggingface",
        kind="multi_label",
        labels=["cough", "fever"],
        hub_name=str(tmp_path / "hub"),
        text_column="note",
        label_column="codes",
        train="train",
        test="train",
    )
    data = load_task(spec, tmp_path, Sampling(None, None, 0))
    assert [example.labels for example in data.splits["test"]] == [(0, 1), ()] * 5
