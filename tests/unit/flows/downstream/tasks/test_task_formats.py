"""A task brought in any format the corpus reads (CSV, JSON lines, Parquet, compressed or not),
and its per-class report."""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import precision_recall_fscore_support

from flows.core.settings import ConfigError
from flows.downstream.kinds.registry import kind_of
from flows.downstream.statistics.per_class import mean_report
from flows.downstream.tasks.load import READERS, Sampling, load_task
from flows.downstream.tasks.readers import TaggedSentence, TextExample
from flows.downstream.tasks.spec import TASK_FORMATS, TaskSpec

ALL = Sampling(None, None, seed=0)
ROWS = [
    {"first": 'a "quoted", comma', "second": "line one\nline two", "label": "entails"},
    {"first": "plain", "second": "other", "label": "contradicts"},
    {"first": "third", "second": "pair", "label": "entails"},
]


def as_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def write_all_formats(directory: Path) -> dict[str, str]:
    """The same three rows as gzip CSV, bzip2 JSON lines and Parquet; format -> file name."""
    (directory / "pairs.csv.gz").write_bytes(gzip.compress(as_csv(ROWS).encode()))
    lines = "".join(json.dumps(row) + "\n" for row in ROWS)
    (directory / "pairs.jsonl.bz2").write_bytes(bz2.compress(lines.encode()))
    columns = {key: [row[key] for row in ROWS] for key in ROWS[0]}
    pq.write_table(pa.table(columns), directory / "pairs.parquet")
    return {"csv": "pairs.csv.gz", "jsonl": "pairs.jsonl.bz2", "parquet": "pairs.parquet"}


@pytest.mark.parametrize("file_format", ["csv", "jsonl", "parquet"])
def test_every_format_reads_the_same_pairs_with_auto_labels(
    tmp_path: Path, file_format: str
) -> None:
    name = write_all_formats(tmp_path)[file_format]
    spec = TaskSpec(
        name="nli", format=file_format, labels="auto", train=name, validation=name, test=name,
        text_column="first", pair_column="second", label_column="label",
    )  # fmt: skip
    data = load_task(spec, tmp_path, ALL)
    assert data.labels == ["contradicts", "entails"]  # sorted: the same ids on every run
    assert data.label_record() == {
        "names": ["contradicts", "entails"],
        "source": "train split",
        "absent_from_test": [],
    }
    assert data.splits["train"] == [
        TextExample('a "quoted", comma', "line one\nline two", 1),
        TextExample("plain", "other", 0),
        TextExample("third", "pair", 1),
    ]


def test_csv_columns_by_position_without_a_header(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text('"x, y",1\nz,0\n')
    spec = TaskSpec(
        name="t", format="csv", labels=["0", "1"], train="t.csv", test="t.csv",
        header=False, text_column=0, label_column=1,
    )  # fmt: skip
    assert load_task(spec, tmp_path, ALL).splits["test"] == [
        TextExample("x, y", None, 1),
        TextExample("z", None, 0),
    ]


def test_a_train_label_missing_from_test_is_reported_not_refused(tmp_path: Path) -> None:
    train = [{"text": text, "label": label} for text, label in [("a", 3), ("b", 1), ("c", 2)]]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in train))
    (tmp_path / "test.jsonl").write_text(json.dumps({"text": "d", "label": 1}) + "\n")
    spec = TaskSpec(
        name="t", format="jsonl", labels="auto", train="train.jsonl", test="test.jsonl",
        text_column="text",
    )  # fmt: skip
    data = load_task(spec, tmp_path, ALL)
    assert data.labels == ["1", "2", "3"]
    assert data.absent_from_test == ["2", "3"]


def test_dropping_contained_rows_keeps_whole_sentences_in_file_order(tmp_path: Path) -> None:
    """SST labels every phrase of a sentence's parse tree; the option keeps the sentences. A
    row is contained only as whole words ("art" is not inside "a smart film"), and a repeated
    text keeps its first row."""
    rows = [
        ("fine", 1),
        ("a smart film , and a fine one", 1),
        ("art", 0),
        ("a fine one", 1),
        ("a dull film", 0),
        ("a dull film", 1),
        ("dull", 0),
    ]
    text = "sentence\tlabel\n" + "".join(f"{row}\t{label}\n" for row, label in rows)
    (tmp_path / "t.tsv").write_text(text)
    spec = TaskSpec(
        name="t", format="glue", labels=["0", "1"], train="t.tsv", validation="t.tsv",
        test="t.tsv", drop_contained_rows=True,
    )  # fmt: skip
    data = load_task(spec, tmp_path, ALL)
    assert data.splits["train"] == [
        TextExample("a smart film , and a fine one", None, 1),
        TextExample("art", None, 0),
        TextExample("a dull film", None, 0),
    ]
    assert len(data.splits["test"]) == len(rows)  # only the train pool is filtered


def test_jsonl_token_classification_reads_token_and_tag_lists(tmp_path: Path) -> None:
    rows = [
        {"tokens": ["fever", "and", "cough"], "tags": ["B-Disease", "O", "B-Disease"]},
        {"tokens": ["no", "signs"], "tags": ["O", "O"]},
    ]
    (tmp_path / "n.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = TaskSpec(
        name="n", format="jsonl", kind="token_classification", metric="entity_f1",
        labels="auto", train="n.jsonl", test="n.jsonl",
    )  # fmt: skip
    data = load_task(spec, tmp_path, ALL)
    assert data.labels == ["B-Disease", "O"]
    assert data.splits["test"] == [
        TaggedSentence(("fever", "and", "cough"), (0, 1, 0)),
        TaggedSentence(("no", "signs"), (1, 1)),
    ]


def test_a_conll_task_is_token_classification_scored_on_entity_f1_unless_told(
    tmp_path: Path,
) -> None:
    (tmp_path / "n.tsv").write_text("fever\tB-Disease\nand\tO\n\nno\tO\n")
    spec = TaskSpec(name="n", format="conll", labels="auto", train="n.tsv", test="n.tsv")
    assert (spec.kind, spec.metric) == ("token_classification", "entity_f1")
    assert load_task(spec, tmp_path, ALL).splits["test"][0] == TaggedSentence(
        ("fever", "and"), (0, 1)
    )
    recall = TaskSpec(
        name="n", format="jsonl", kind="token_classification", metric="entity_recall",
        labels="auto", train="n.jsonl", test="n.jsonl",
    )  # fmt: skip
    assert (recall.metric, recall.text_column) == ("entity_recall", "tokens")
    assert TaskSpec(name="t", format="csv", labels="auto", train="t.csv", test="t.csv").kind == (
        "classification"
    )


def test_per_class_scores_agree_with_scikit_learn_and_mark_untested_classes() -> None:
    labels = ["a", "b", "c", "never_tested"]
    gold = [0, 0, 1, 1, 2, 2, 2]
    predicted = [0, 1, 1, 1, 2, 0, 3]
    report = kind_of("classification").per_class(gold, predicted, labels)
    precision, recall, f1, support = precision_recall_fscore_support(
        gold, predicted, labels=[0, 1, 2], zero_division=0
    )
    for index, name in enumerate(labels[:3]):
        assert report[name] == pytest.approx(
            {"precision": precision[index], "recall": recall[index], "f1": f1[index],
             "support": support[index]}
        )  # fmt: skip
    assert report["never_tested"] == {"precision": 0.0, "recall": None, "f1": 0.0, "support": 0}


def test_per_entity_type_scores_count_exact_spans() -> None:
    labels = ["O", "B-Gene", "I-Gene", "B-Disease"]
    gold = [[1, 2, 0, 3], [3, 0]]
    predicted = [[1, 0, 0, 3], [3, 0]]  # the gene's span is cut short: a miss and a false hit
    report = kind_of("token_classification").per_class(gold, predicted, labels)
    assert report["Gene"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert report["Disease"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2}
    merged = mean_report([report, kind_of("token_classification").per_class(gold, gold, labels)])
    assert merged["Gene"] == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 1}


def test_every_task_format_but_a_built_in_task_has_its_reader_in_the_one_table() -> None:
    read = {name for name, traits in TASK_FORMATS.items() if traits.source != "built_in"}
    assert set(READERS) == read


def test_a_kind_its_format_cannot_hold_is_refused_naming_what_each_format_holds() -> None:
    with pytest.raises(ConfigError) as refused:
        TaskSpec(name="t", format="conll", kind="classification", train="a", test="b")
    assert str(refused.value) == (
        "finetune.catalog.t: format 'conll' cannot be kind 'classification' (pydoc_topics holds "
        "classification; glue holds classification or relation; csv holds classification, "
        "relation or multi_label; conll holds token_classification; semeval2010 holds relation; "
        "squad holds question_answering; jsonl, parquet and huggingface hold any kind)"
    )
