"""Readers for GLUE-format TSV, CoNLL/IOB2 and SemEval-2010 Task 8 files: rows in, labelled
examples out.

They are read by hand rather than with `csv`: GLUE sentences contain quote characters and must be
split on tabs with no quoting at all, and every error has to name the file and line.
Label ids come from a `LabelIndex`, which also collects the label set for `labels: auto`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flows.downstream.tasks.spec import Column, TaskInputError, TaskSpec

IOB2_TAG = re.compile(r"O|[BI]-\S+")


@dataclass(frozen=True)
class TextExample:
    """One sentence (or sentence pair) and its label id; `at` is where it was read (`file:line`),
    for a check that drops rows to name them (flows/downstream/tasks/relation.py)."""

    text: str
    pair: str | None
    label: int
    at: str = field(default="", compare=False)


@dataclass(frozen=True)
class LabelSetExample:
    """One sentence (or sentence pair) and the ids of its labels, none or several (a multi-label
    task's example, flows/downstream/kinds/multi_label.py)."""

    text: str
    pair: str | None
    labels: tuple[int, ...]


@dataclass(frozen=True)
class TaggedSentence:
    """Pre-split words and their IOB2 tag ids."""

    tokens: tuple[str, ...]
    tags: tuple[int, ...]


class LabelIndex:
    """Label name -> id for one task; `collecting()` accepts every label and records it instead,
    the first pass over train when the task says `labels: auto`."""

    def __init__(self, spec: TaskSpec, names: list[str] | None) -> None:
        self.key = f"finetune.catalog.{spec.name}"
        self.auto = spec.labels == "auto"
        self.names = names
        self.ids = {name: index for index, name in enumerate(names or [])}
        self.seen: set[str] = set()

    @classmethod
    def collecting(cls, spec: TaskSpec) -> LabelIndex:
        return cls(spec, None)

    def id(self, label: str, at: str, what: str = "label") -> int:
        """The id of `label`, read at `at` (file:line); unknown or empty labels name the row."""
        if not label:
            raise TaskInputError(
                f"{at}: the {what} is empty; every row needs a {what}: fix or remove the row"
            )
        if self.names is None:
            self.seen.add(label)
            return 0
        if label in self.ids:
            return self.ids[label]
        if self.auto:
            listed = ", ".join(sorted([*self.names, label]))
            raise TaskInputError(
                f"{at}: {what} {label!r} never occurs in the train split ({self.key}.labels=auto "
                f"takes the label set from train: {self.names}); if the task has it (a rare "
                f"label a train sample can miss), list the labels: '{self.key}.labels=[{listed}]' "
                f"(in a task file: labels: [{listed}]); else fix the row"
            )
        raise TaskInputError(
            f"{at}: {what} {label!r} is not in {self.key}.labels {self.names}; add it to the "
            "label list or fix the row"
        )


def first_line_looks(line: str) -> str:
    """What a file's first line looks like, for an error message only: reading never guesses."""
    stripped = line.strip()
    if stripped.startswith("{"):
        return " The first line looks like JSON: format: jsonl reads JSON lines."
    if "\t" in stripped:
        return " The first line is tab-separated: format: glue reads TSV (tabs, no quoting)."
    if "," in stripped:
        return " The first line is comma-separated: format: csv reads it (RFC 4180 quoting)."
    return ""


def read_lines(path: Path, spec: TaskSpec) -> list[str]:
    """The file's lines; `utf-8-sig` drops the byte-order mark MRPC's header starts with."""
    try:
        return path.read_text(encoding="utf-8-sig").split("\n")
    except FileNotFoundError:
        raise TaskInputError(
            f"{path} does not exist; fix finetune.catalog.{spec.name}'s paths, or set "
            "CLOZE_DATA_DIR (or finetune.data_dir) to the folder that holds the data"
        ) from None
    except UnicodeDecodeError as error:
        raise TaskInputError(f"{path} is not valid UTF-8 ({error.reason}); convert it") from None


def column_position(
    column: Column, header: Sequence[str] | None, where: str, key: str, hint: str = ""
) -> int:
    """A column's index; a missing name lists the columns found and what the file looks like."""
    if isinstance(column, int):
        return column
    if header is None:
        raise TaskInputError(
            f"{where} has no header ({key}.header=false), so {key} must name columns by "
            f"position (0, 1, ...), not {column!r}"
        )
    if column not in header:
        if not hint and looks_like_an_example(header):
            hint = (
                f" If it is an example, not column names, set {key}.header=false and name the "
                "columns by position (text_column: 0, label_column: 1)."
            )
        raise TaskInputError(
            f"{where}:1 has no column {column!r} (columns: {', '.join(map(repr, header))}); "
            f"set the {key} column settings to one of them{'.' + hint if hint else ''}"
        )
    return header.index(column)


def looks_like_an_example(header: Sequence[str]) -> bool:
    """A first line of a headerless file: a field of several words, or a number (a label)."""
    return any(len(name.split()) > 2 or name.strip().lstrip("-").isdigit() for name in header)


@dataclass(frozen=True)
class TextRow:
    """A row's text, second sentence (None for a single-sentence task) and label field as read,
    checked but not yet looked up: a label, or a multi-label task's separated list of them."""

    text: str
    pair: str | None
    label: str
    at: str


def text_rows(
    rows: Iterable[tuple[int, Sequence[str]]],
    header: Sequence[str] | None,
    where: str,
    spec: TaskSpec,
    separator: str = "tab-separated",
    hint: str = "",
) -> Iterator[TextRow]:
    """Picks text, pair and label field from each `(line number, fields)` row and checks them."""
    key = f"finetune.catalog.{spec.name}"
    text_at = column_position(spec.text_column, header, where, key, hint)
    label_at = column_position(spec.label_column, header, where, key, hint)
    pair_at = (
        None
        if spec.pair_column is None
        else column_position(spec.pair_column, header, where, key, hint)
    )
    for line, fields in rows:
        needed = max(text_at, label_at, -1 if pair_at is None else pair_at) + 1
        if len(fields) < max(text_at, label_at) + 1:
            raise TaskInputError(
                f"{where}:{line} has {len(fields)} {separator} fields, but {key} reads "
                f"column {max(text_at, label_at)}; every row needs {needed} fields"
            )
        pair = None
        if pair_at is not None:
            pair = fields[pair_at].strip() if pair_at < len(fields) else ""
            if not pair:
                raise TaskInputError(
                    f"{where}:{line} has no second sentence (column {spec.pair_column!r}); "
                    "every row of a sentence-pair task needs both sentences: fix or remove it"
                )
        text = fields[text_at].strip()
        if not text:
            raise empty_text(f"{where}:{line}", spec.text_column)
        yield TextRow(text, pair, fields[label_at].strip(), f"{where}:{line}")


def text_examples(
    rows: Iterable[tuple[int, Sequence[str]]],
    header: Sequence[str] | None,
    where: str,
    spec: TaskSpec,
    labels: LabelIndex,
    separator: str = "tab-separated",
    hint: str = "",
) -> list[TextExample]:
    """Each row's text, pair and label id (`text_rows`)."""
    return [
        TextExample(row.text, row.pair, labels.id(row.label, row.at), row.at)
        for row in text_rows(rows, header, where, spec, separator, hint)
    ]


def empty_text(at: str, column: Column) -> TaskInputError:
    return TaskInputError(
        f"{at}: the text (column {column!r}) is empty; a model cannot classify nothing: fix or "
        "remove the row"
    )


def read_glue(path: Path, spec: TaskSpec, labels: LabelIndex) -> list[TextExample]:
    """A GLUE-format TSV: one example per line, fields split on tabs, no quoting."""
    lines = read_lines(path, spec)
    header = lines[0].rstrip("\r").split("\t") if spec.header else None
    start = 1 if spec.header else 0
    rows = (
        (number, line.rstrip("\r").split("\t"))
        for number, line in enumerate(lines[start:], start=start + 1)
        if line.strip()
    )
    hint = first_line_looks(lines[0]) if header is not None and len(header) == 1 else ""
    return text_examples(rows, header, str(path), spec, labels, hint=hint)


def read_conll(path: Path, spec: TaskSpec, labels: LabelIndex) -> list[TaggedSentence]:
    """`token<TAB>tag` lines, blank lines between sentences; the tag is the last field."""
    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[int] = []
    for number, raw in enumerate(read_lines(path, spec), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.startswith("-DOCSTART-"):
            if tokens:
                sentences.append(TaggedSentence(tuple(tokens), tuple(tags)))
            tokens, tags = [], []
            continue
        if "\t" not in line:
            raise TaskInputError(
                f"{path}:{number} has no tab: expected 'token<TAB>tag'; separate the token "
                "from its tag with a tab (blank lines separate sentences)"
            )
        fields = line.split("\t")
        if not fields[0].strip():
            raise TaskInputError(
                f"{path}:{number} has an empty token before its tab; every line needs a word: "
                "fix or remove the line"
            )
        tokens.append(fields[0])
        tags.append(tag_id(fields[-1].strip(), f"{path}:{number}", labels))
    if tokens:
        sentences.append(TaggedSentence(tuple(tokens), tuple(tags)))
    return sentences


def tag_id(tag: str, at: str, labels: LabelIndex) -> int:
    """An IOB2 tag's id: entity F1 reads spans from B-/I- prefixes, so other schemes are refused."""
    if tag and not IOB2_TAG.fullmatch(tag):
        raise TaskInputError(
            f"{at}: tag {tag!r} is not IOB2 (O, B-<type> or I-<type>); fix the "
            "line (IOBES or BILOU files need converting to IOB2 first)"
        )
    return labels.id(tag, at, "tag")


SEMEVAL_SENTENCE = re.compile(r'(\d+)\t"(.*)"')


def read_semeval2010(path: Path, spec: TaskSpec, labels: LabelIndex) -> list[TextExample]:
    """SemEval-2010 Task 8's files as released: records of an `ID<TAB>"sentence"` line, the
    relation, an optional `Comment:` line, then blank lines (CRLF line ends)."""
    examples = []
    lines = [line.rstrip("\r") for line in read_lines(path, spec)]
    number = 0
    while number < len(lines):
        if not lines[number].strip():
            number += 1
            continue
        at = f"{path}:{number + 1}"
        sentence = SEMEVAL_SENTENCE.fullmatch(lines[number])
        if sentence is None:
            raise TaskInputError(
                f"{at}: expected a record's first line, 'ID<TAB>\"sentence\"' (format: "
                f"semeval2010, SemEval-2010 Task 8's files); got {lines[number][:60]!r}"
            )
        relation = lines[number + 1].strip() if number + 1 < len(lines) else ""
        label = labels.id(relation, f"{path}:{number + 2}", "relation")
        examples.append(TextExample(sentence.group(2), None, label, at))
        number += 2
        if number < len(lines) and lines[number].startswith("Comment"):
            number += 1
    return examples
