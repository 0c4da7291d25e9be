"""Multi-label classification (flows/downstream/kinds/multi_label.py): a label set per example,
read from JSON lines, scored on micro- and macro-F1 as sklearn scores them, with bootstrap units
that give those figures exactly, per-label figures and a per-label majority baseline."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sklearn.metrics import f1_score
from sklearn.preprocessing import MultiLabelBinarizer

from flows.downstream.kinds.registry import kind_of
from flows.downstream.tasks.load import Sampling, load_task
from flows.downstream.tasks.readers import LabelSetExample
from flows.downstream.tasks.spec import TaskSpec

LABELS = ["cough", "fever", "flu", "gout"]
MULTI_LABEL = kind_of("multi_label")


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
    spec = TaskSpec(
        name="m", format="jsonl", kind="multi_label", labels=LABELS, train="x", test="y"
    )
    train = [LabelSetExample("t", None, labels) for labels in ((1,), (1, 2), (1, 3), (0,))]
    test = [LabelSetExample("t", None, ()) for _ in range(3)]
    predictions, _ = MULTI_LABEL.fit_baseline(
        "majority", spec, LABELS, {"train": train, "test": test}
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
