"""Extractive question answering's examples: the official SQuAD JSON (v1.1 and v2.0) and records
in the `datasets` `squad` schema (`id`, `question`, `context`, `answers: {text, answer_start}`).

Every answer is checked against its context: `context[answer_start:answer_start + len(text)]`
must be the text, or the offsets the encoder learns from point elsewhere. A mismatch is counted
over the whole file and reported with the first question's id, before any stage runs. A file
without a question marked `is_impossible` (and no empty answer list) is SQuAD v1.1: every
question has an answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows.downstream.tasks.spec import TaskInputError, TaskSpec

# Record fields (jsonl, parquet, hub) of each role, unless `qa_columns` renames them.
QA_COLUMNS = {role: role for role in ("id", "title", "question", "context", "answers")}


@dataclass(frozen=True)
class QAExample:
    """One question on its context; no answer (`answers == ()`) is SQuAD 2.0's unanswerable.
    `group` keeps questions that share text together when splits are carved: the article's
    title, else the context itself."""

    id: str
    question: str
    context: str
    answers: tuple[str, ...]
    starts: tuple[int, ...]
    group: str = field(default="", compare=False)
    at: str = field(default="", compare=False)


@dataclass
class Found:
    """Questions of one fault in a file: counted, the first one named."""

    count: int = 0
    first: str = ""

    def add(self, which: str) -> None:
        self.count += 1
        self.first = self.first or which


@dataclass
class Mismatches:
    """A file's questions checked against SQuAD's rules, counted over the whole file and refused
    with the first offender named: an answer that is not the context at its offset, an answer of
    empty text, a question marked `is_impossible` that lists answers (SQuAD 2.0 keeps those
    spans under `plausible_answers`; its scorer would grade them as gold), and an id used twice
    (predictions and scores are keyed by id)."""

    where: str
    offsets: Found = field(default_factory=Found)
    empty: Found = field(default_factory=Found)
    impossible: Found = field(default_factory=Found)
    duplicates: Found = field(default_factory=Found)
    ids: dict[str, str] = field(default_factory=dict)

    def check(self, example: QAExample, impossible_answers: int = 0) -> None:
        name = f"{example.id} ({example.at})"
        for text, start in zip(example.answers, example.starts, strict=True):
            if not text.strip():
                self.empty.add(name)
            elif example.context[start : start + len(text)] != text:
                self.offsets.add(name)
        if impossible_answers:
            self.impossible.add(f"{name}, with {impossible_answers}")
        if example.id in self.ids:
            self.duplicates.add(f"{example.id!r} ({self.ids[example.id]} and {example.at})")
        self.ids.setdefault(example.id, example.at)

    def raise_any(self) -> None:
        faults = (
            (
                self.offsets,
                "answer(s) differ from context[answer_start:answer_start+len(text)], first: "
                "question {first}; fix the offsets (0-based characters into the context)",
            ),
            (
                self.empty,
                "answer(s) have empty text, first: question {first}; an unanswerable question "
                "has no answers (answers: [], or is_impossible: true): remove the empty answer",
            ),
            (
                self.impossible,
                "question(s) are marked is_impossible: true but list answers, first: question "
                "{first}; SQuAD 2.0 keeps an unanswerable question's spans under "
                "plausible_answers: empty its answers, or set is_impossible: false",
            ),
            (
                self.duplicates,
                "question id(s) repeat, first: {first}; each question needs its own id "
                "(predictions and scores are keyed by it)",
            ),
        )
        for found, words in faults:
            if found.count:
                raise TaskInputError(
                    f"{self.where}: {found.count} {words.format(first=found.first)}"
                )


def need(value: dict[str, Any], name: str, kind: type | tuple[type, ...], at: str) -> Any:
    """A required JSON field of the right type; a missing or wrong one names its JSON path."""
    if not isinstance(value, dict) or name not in value:
        raise TaskInputError(f"{at} has no field {name!r}; every SQuAD entry needs it")
    found = value[name]
    if not isinstance(found, kind) or isinstance(found, bool):
        raise TaskInputError(
            f"{at}.{name} is a {type(found).__name__}, expected {getattr(kind, '__name__', kind)}"
        )
    return found


def read_squad(path: Path, spec: TaskSpec, labels: Any = None) -> list[QAExample]:
    """The official SQuAD JSON: `data[].paragraphs[].qas[]`, answers as `{text, answer_start}`;
    a v2.0 question with `is_impossible: true` has no answer (its `plausible_answers` are not
    gold and are ignored)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise TaskInputError(
            f"{path} does not exist; fix finetune.catalog.{spec.name}'s paths, or set "
            "CLOZE_DATA_DIR (or finetune.data_dir) to the folder that holds the data"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise TaskInputError(
            f"{path} is not SQuAD JSON ({error}); format: squad reads it"
        ) from None
    where = str(path)
    mismatches = Mismatches(where)
    examples = []
    for a, article in enumerate(need(document, "data", list, f"{where}: $")):
        at = f"{where}: $.data[{a}]"
        title = str(article.get("title", "")) if isinstance(article, dict) else ""
        for p, paragraph in enumerate(need(article, "paragraphs", list, at)):
            p_at = f"{at}.paragraphs[{p}]"
            context = need(paragraph, "context", str, p_at)
            for q, qa in enumerate(need(paragraph, "qas", list, p_at)):
                example = squad_question(qa, context, title or context, f"{p_at}.qas[{q}]")
                impossible = example.answers == () and qa.get("is_impossible", False) is True
                mismatches.check(example, len(qa["answers"]) if impossible else 0)
                examples.append(example)
    mismatches.raise_any()
    return examples


def squad_question(qa: Any, context: str, group: str, at: str) -> QAExample:
    """One `qas[]` entry; `is_impossible` (v2.0) means no answer, whatever `answers` holds."""
    answers = need(qa, "answers", list, at)
    impossible = qa.get("is_impossible", False) is True
    texts, starts = [], []
    for index, answer in enumerate([] if impossible else answers):
        texts.append(need(answer, "text", str, f"{at}.answers[{index}]"))
        starts.append(need(answer, "answer_start", int, f"{at}.answers[{index}]"))
    return QAExample(
        str(need(qa, "id", (str, int), at)),
        need(qa, "question", str, at),
        context,
        tuple(texts),
        tuple(starts),
        group,
        at,
    )


def qa_columns(spec: TaskSpec) -> dict[str, str]:
    unknown = set(spec.qa_columns) - set(QA_COLUMNS)
    if unknown:
        raise TaskInputError(
            f"finetune.catalog.{spec.name}.qa_columns names {sorted(unknown)}: the roles are "
            f"{', '.join(QA_COLUMNS)}"
        )
    return {**QA_COLUMNS, **spec.qa_columns}


def qa_records(
    records: Iterable[tuple[int, dict[str, Any]]], where: str, spec: TaskSpec
) -> list[QAExample]:
    """Records of the `datasets` squad schema: `answers` is `{text: [...], answer_start: [...]}`
    (empty lists: unanswerable); a `title` field, where present, groups the questions."""
    columns = qa_columns(spec)
    mismatches = Mismatches(where)
    examples = []
    for line, record in records:
        at = f"{where}:{line}"
        answers = need(record, columns["answers"], dict, at)
        texts = need(answers, "text", list, f"{at}.{columns['answers']}")
        starts = need(answers, "answer_start", list, f"{at}.{columns['answers']}")
        if len(texts) != len(starts):
            raise TaskInputError(
                f"{at}.{columns['answers']}: {len(texts)} texts but {len(starts)} answer_start "
                "values; give one start per answer text"
            )
        context = need(record, columns["context"], str, at)
        title = record.get(columns["title"])
        example = QAExample(
            str(need(record, columns["id"], (str, int), at)),
            need(record, columns["question"], str, at),
            context,
            tuple(str(text) for text in texts),
            tuple(int(start) for start in starts),
            str(title) if title else context,
            at,
        )
        mismatches.check(example)
        examples.append(example)
    mismatches.raise_any()
    return examples


def check_unanswerable(spec: TaskSpec, train: list[QAExample], where: str) -> None:
    """`unanswerable: true` asks for SQuAD 2.0's null-score threshold: a train split with no
    unanswerable question (v1.1) has nothing to learn it from."""
    if spec.unanswerable is True and all(example.answers for example in train):
        raise TaskInputError(
            f"{where}: no question is unanswerable (SQuAD v1.1: no is_impossible, no empty "
            f"answers), but finetune.catalog.{spec.name}.unanswerable=true asks for the v2.0 "
            "null-score threshold; remove unanswerable (or set it to null, or to drop for "
            "answerable-only EM/F1), or use a v2.0 file"
        )
