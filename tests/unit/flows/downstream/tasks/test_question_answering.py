"""Question answering's reading, splits, windows and decoding, on crafted examples."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from flows.downstream.tasks.encoding import stand_in_tokenizer
from flows.downstream.tasks.load import Sampling, load_task
from flows.downstream.tasks.qa_decoding import (
    Candidate,
    abstains_everywhere,
    answers,
    candidates,
    fit_threshold,
)
from flows.downstream.tasks.qa_encoding import CLS_SPAN, encode_questions, span_text
from flows.downstream.tasks.spec import TaskSpec, default_data_dir
from flows.downstream.tasks.squad import QAExample, read_squad
from tests.fakes import squad_articles

CONTEXT = " ".join(f"w{index}" for index in range(40))  # 40 words, one token each


def example(answer: str | None, question: str = "which word ?") -> QAExample:
    if answer is None:
        return QAExample("q", question, CONTEXT, (), ())
    return QAExample("q", question, CONTEXT, (answer,), (CONTEXT.index(answer),))


def spec(**fields: Any) -> TaskSpec:
    return TaskSpec(
        **{"name": "qa", "format": "squad", "kind": "question_answering", "train": "x", **fields}
    )


def test_a_long_context_becomes_overlapping_windows_of_the_context_alone() -> None:
    encoded = encode_questions(stand_in_tokenizer(16), [example("w30 w31")], 16, 4, True)
    # [CLS], 3 question tokens, [SEP], context, [SEP]: 11 context tokens a window, 4 of them
    # shared with the window before, so 7 new ones a window: 11 + 5 * 7 >= 40 in 6 windows
    windows = encoded.items
    assert len(windows) == 6 and encoded.window_example == [0] * 6
    for window, offsets in zip(windows, encoded.offsets, strict=True):
        assert len(window["input_ids"]) <= 16
        assert window["token_type_ids"][:5] == [0] * 5  # the question is never cut
        starts = [o for o in offsets if o is not None]
        assert CONTEXT[starts[0][0] : starts[-1][1]].startswith("w")
    spans = [window["labels"] for window in windows]
    holding = [w for w, span in enumerate(spans) if span != CLS_SPAN]
    assert holding  # the answer lies whole in some window, mapped through the offsets
    for w in holding:
        first, last = spans[w]
        assert span_text(CONTEXT, encoded.offsets[w], first, last) == "w30 w31"
    assert all(spans[w] == CLS_SPAN for w in range(6) if w not in holding)


def test_an_unanswerable_question_is_the_cls_span_in_every_window() -> None:
    encoded = encode_questions(stand_in_tokenizer(16), [example(None)], 16, 4, True)
    assert {window["labels"] for window in encoded.items} == {CLS_SPAN}


def test_a_long_question_is_cut_to_half_the_length_and_counted() -> None:
    long = example("w1", question=" ".join(["why"] * 30))
    encoded = encode_questions(stand_in_tokenizer(32), [long], 32, 4, True)
    assert encoded.truncated == 1
    assert all(window["token_type_ids"].count(0) <= 16 + 2 for window in encoded.items)


def test_decoding_takes_the_best_span_over_windows_and_the_lowest_null_score() -> None:
    encoded = encode_questions(stand_in_tokenizer(16), [example("w30")], 16, 4, True)
    logits = []
    for window, item in enumerate(encoded.items):
        start, end = [0.0] * len(item["input_ids"]), [0.0] * len(item["input_ids"])
        if item["labels"] != CLS_SPAN:
            first, last = item["labels"]
            start[first], end[last] = 5.0, 4.0
        start[0] = end[0] = 1.0 + window  # the null score: lowest in the first window
        logits.append((start, end))
    (found,) = candidates(encoded, logits)
    assert (found.text, found.score, found.null_score) == ("w30", 9.0, 2.0)


def test_the_null_threshold_is_the_one_that_scores_best() -> None:
    gold = [["a"], [], [], ["b"]]
    found = [
        Candidate("a", 5.0, 1.0),  # margin -4: answer
        Candidate("x", 2.0, 4.0),  # margin +2: should abstain
        Candidate("y", 3.0, 3.5),  # margin +0.5: should abstain
        Candidate("b", 3.0, 2.0),  # margin -1: answer
    ]
    threshold = fit_threshold(gold, found, "f1")
    assert -1.0 <= threshold < 0.5
    assert answers(found, threshold) == ["a", "", "", "b"]
    assert answers(found, None) == ["a", "x", "y", "b"]  # v1.1: always answer


def test_when_answering_nothing_is_best_on_validation_test_abstains_everywhere() -> None:
    """As the official `best_f1` starts from answering none: every span here is wrong, so the
    threshold is -inf, and applied to test it abstains on every question, whatever its margin
    (the lowest validation margin would answer test questions below it)."""
    gold = [["b"], [], []]
    found = [Candidate("x", 5.0, 1.0), Candidate("y", 2.0, 4.0), Candidate("z", 3.0, 3.5)]
    threshold = fit_threshold(gold, found, "f1")
    assert threshold == -math.inf and abstains_everywhere(threshold)
    assert answers(found, threshold) == ["", "", ""]
    test = [Candidate("far", 50.0, 1.0), Candidate("near", 2.0, 1.9)]  # margins -49, -0.1
    assert answers(test, threshold) == ["", ""]


def test_a_validation_that_ties_with_abstaining_everywhere_abstains_everywhere() -> None:
    """The unanswerable question has the lower margin, so no cut answers the answerable one
    alone: answering both scores what abstaining on both does, and the tie goes to abstaining
    (the official script's strict `>`)."""
    gold = [["a"], []]
    found = [Candidate("a", 5.0, 2.0), Candidate("x", 5.0, 1.0)]  # margins -3, -4
    assert fit_threshold(gold, found, "f1") == -math.inf


def test_the_threshold_is_finite_when_some_question_has_no_span() -> None:
    """No valid span: margin +inf, answered with nothing whatever the threshold; the threshold
    itself stays a number results.json and MLflow can hold."""
    gold = [["b"], []]
    found = [Candidate("b", 5.0, 1.0), Candidate("", -math.inf, 2.0)]
    threshold = fit_threshold(gold, found, "f1")
    assert math.isfinite(threshold)
    assert answers(found, threshold) == ["b", ""]
    assert fit_threshold([[]], [Candidate("", -math.inf, 2.0)], "f1") == 0.0


def test_a_single_file_is_split_by_article_never_by_question(tmp_path: Path) -> None:
    (tmp_path / "q.json").write_text(json.dumps(squad_articles(15, 5, seed=4)))
    data = load_task(spec(train="q.json"), tmp_path, Sampling(None, None, 0))
    articles = {name: {e.group for e in split} for name, split in data.splits.items()}
    assert articles["test"] == {"article12", "article13", "article14"}  # the last fifth
    assert len(articles["validation"]) == 1  # a tenth of the 12 left, by article (10 or more)
    assert not articles["train"] & articles["validation"]
    assert not (articles["train"] | articles["validation"]) & articles["test"]


@pytest.mark.skipif(
    not (default_data_dir() / "squad_v2_dev_fragment").is_dir(), reason="shared data absent"
)
def test_the_shared_fragment_reads_as_its_provenance_counts() -> None:
    path = default_data_dir() / "squad_v2_dev_fragment" / "dev-v2.0-fragment.json"
    questions = read_squad(path, spec(train=str(path), test=str(path)))
    assert len(questions) == 950
    assert sum(1 for q in questions if q.answers) == 473
    assert len({q.group for q in questions}) == 3


def test_a_labelled_sample_draws_questions_with_all_their_windows() -> None:
    """`finetune.train_examples` and `label_counts` count questions, not windows."""
    questions = [example("w30"), example(None), example("w2 w3")]
    encoded = encode_questions(stand_in_tokenizer(16), questions, 16, 4, True)
    sample = encoded.subset([2, 0])
    assert [q.answers for q in sample.examples] == [("w2 w3",), ("w30",)]
    assert sample.gold == [["w2 w3"], ["w30"]]
    per_question = len(encoded.items) // 3  # each context is the same 40 words
    assert len(sample.items) == 2 * per_question
    assert sample.window_example == [0] * per_question + [1] * per_question


def test_squad_schema_records_read_alike_from_jsonl_parquet_and_a_datasets_folder(
    tmp_path: Path,
) -> None:
    import datasets

    from flows.downstream.tasks.hub import read_hub
    from flows.downstream.tasks.readers import LabelIndex
    from flows.downstream.tasks.record_readers import read_jsonl, read_parquet

    records = {
        "id": ["a", "b"],
        "title": ["t", "t"],
        "query": ["who led?", "who sang?"],
        "context": ["Rollo led the Normans.", "Rollo led the Normans."],
        "answers": [{"text": ["Rollo"], "answer_start": [0]}, {"text": [], "answer_start": []}],
    }
    dataset = datasets.Dataset.from_dict(records)
    dataset.to_json(tmp_path / "q.jsonl")
    dataset.to_parquet(tmp_path / "q.parquet")
    dataset.save_to_disk(tmp_path / "hub")
    renamed = {"qa_columns": {"question": "query"}}
    read = [
        read_jsonl(tmp_path / "q.jsonl", s := spec(format="jsonl", **renamed), LabelIndex(s, [])),
        read_parquet(tmp_path / "q.parquet", s, LabelIndex(s, [])),
        read_hub(
            "train",
            h := spec(format="huggingface", hub_name=str(tmp_path / "hub"), **renamed),
            LabelIndex(h, []),
        ),
    ]
    for examples in read:
        assert [(e.id, e.question, e.answers, e.starts) for e in examples] == [
            ("a", "who led?", ("Rollo",), (0,)),
            ("b", "who sang?", (), ()),
        ]
        assert {e.group for e in examples} == {"t"}


def test_label_counts_count_questions_of_the_train_pool(tmp_path: Path) -> None:
    from flows.core.settings import ConfigError
    from flows.downstream.settings import FinetuneSettings

    (tmp_path / "q.json").write_text(json.dumps(squad_articles(5, 10, seed=3)))
    task = {"format": "squad", "kind": "question_answering", "train": "q.json"}
    settings = FinetuneSettings(
        tasks=["qa"], catalog={"qa": task}, data_dir=str(tmp_path), label_counts=[10, 100]
    )
    # 50 questions: the last article (10) is test, 4 contexts of the rest validation: 36 left
    with pytest.raises(ConfigError, match=r"than task qa's train pool holds \(36 examples"):
        settings.check_task_files(0)
    settings.model_copy(update={"label_counts": [10, 36]}).check_task_files(0)
