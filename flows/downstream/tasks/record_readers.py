"""Task files in the corpus's formats (JSON lines, CSV, Parquet), read by flows/corpora/formats.py.

One reading layer: decoding, compression (`.gz`, `.bz2`, `.zst`) and record parsing are the
corpus's; this module only picks a task's columns out of each record and checks them. Columns are
named, or (CSV and Parquet) given by 0-based position. Token classification reads a list of
tokens and a list of IOB2 tags per record (`text_column`/`label_column`: `tokens`/`tags` unless
set). A relation task's records may give each entity's character offsets instead of inline
markers (`entity_offsets`): the markers are inserted at them (flows/downstream/tasks/markers.py).
A multi-label task reads a list of label names per record, or per CSV row one column of them
separated by the task's `label_separator`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flows.corpora.formats import (
    CorpusInputError,
    Lines,
    ReadRules,
    csv_records,
    decoded_lines,
    json_objects,
    parquet_columns,
    parquet_records,
)
from flows.corpora.stats import CorpusStats
from flows.downstream.tasks.markers import entity_span, insert_markers
from flows.downstream.tasks.readers import (
    LabelIndex,
    LabelSetExample,
    TaggedSentence,
    TextExample,
    column_position,
    empty_text,
    first_line_looks,
    tag_id,
    text_examples,
    text_rows,
)
from flows.downstream.tasks.spec import Column, TaskInputError, TaskSpec
from flows.downstream.tasks.squad import QAExample, qa_columns, qa_records

Records = Iterator[tuple[int, dict[str, Any]]]
# A split's examples, of the task's kind.
Examples = list[TextExample] | list[TaggedSentence] | list[LabelSetExample] | list[QAExample]


def require_file(path: Path, spec: TaskSpec) -> None:
    if not path.is_file():
        raise TaskInputError(
            f"{path} does not exist; fix finetune.catalog.{spec.name}'s paths, or set "
            "CLOZE_DATA_DIR (or finetune.data_dir) to the folder that holds the data"
        )


def lines_of(path: Path, spec: TaskSpec) -> Lines:
    """The file's decoded lines, without a leading byte-order mark (Excel writes one)."""
    require_file(path, spec)
    for number, line in decoded_lines(path, ReadRules(), CorpusStats()):
        yield number, line.removeprefix("\ufeff") if number == 1 else line


def read_csv(
    path: Path, spec: TaskSpec, labels: LabelIndex
) -> list[TextExample] | list[LabelSetExample]:
    """An RFC 4180 CSV: a quoted field may hold commas, quotes ("") and newlines. A multi-label
    task's label column holds its label names separated by `label_separator` (empty for none)."""
    records = csv_records(path, lines_of(path, spec), ReadRules())
    header: list[str] | None = None
    hint = ""
    if spec.header:
        first = next(records, None)
        header = [] if first is None else [name.strip() for name in first[1]]
        if len(header) == 1:
            hint = first_line_looks(header[0])
    if spec.facts.example != "label_set":
        return text_examples(records, header, str(path), spec, labels, "comma-separated", hint)
    separator = str(spec.label_separator)  # set for every multi-label csv task (spec.py)
    return [
        LabelSetExample(
            row.text,
            row.pair,
            label_set(row.label.split(separator) if row.label else [], row.at, spec, labels),
        )
        for row in text_rows(records, header, str(path), spec, "comma-separated", hint)
    ]


def jsonl_records(path: Path, spec: TaskSpec) -> Records:
    """JSON objects; a first line that is not JSON says what it looks like instead."""
    lines = lines_of(path, spec)
    try:
        yield from json_objects(path, lines)
    except CorpusInputError as error:
        first = next(lines_of(path, spec), (1, ""))[1]
        hint = first_line_looks(first) if str(error).startswith(f"{path}:1 ") else ""
        raise TaskInputError(f"{error}.{hint}" if hint else str(error)) from error


def named(column: Column, spec: TaskSpec, names: list[str] | None, where: str) -> str:
    """A column's name; positions only where a file has an order of columns (Parquet)."""
    if isinstance(column, str):
        return column
    if names is None:
        raise TaskInputError(
            f"{where}: JSON records have no column order; name the field in "
            f"finetune.catalog.{spec.name} (not position {column})"
        )
    return names[column_position(column, names, where, f"finetune.catalog.{spec.name}")]


def field(record: dict[str, Any], name: str, at: str, spec: TaskSpec) -> Any:
    if name not in record:
        raise TaskInputError(
            f"{at} has no field {name!r} (fields: {', '.join(map(repr, record))}); set the "
            f"finetune.catalog.{spec.name} column settings to one of them"
        )
    return record[name]


def as_label(value: Any) -> str:
    return "" if value is None else str(value).strip()


def record_pair(
    record: dict[str, Any], columns: dict[str, str | None], at: str, spec: TaskSpec
) -> str | None:
    """The record's second sentence, for a sentence-pair task; None for a single-sentence one."""
    if columns["pair"] is None:
        return None
    pair = str(field(record, columns["pair"], at, spec) or "").strip()
    if not pair:
        raise TaskInputError(
            f"{at} has no second sentence (field {columns['pair']!r}); every row of a "
            "sentence-pair task needs both sentences: fix or remove it"
        )
    return pair


def record_examples(
    records: Records, columns: dict[str, str | None], where: str, spec: TaskSpec, labels: LabelIndex
) -> list[TextExample]:
    examples = []
    for line, record in records:
        at = f"{where}:{line}"
        pair = record_pair(record, columns, at, spec)
        text = str(field(record, str(columns["text"]), at, spec) or "")
        if spec.entity_offsets is not None:
            spans = [
                entity_span(field(record, name, at, spec), text, name, at)
                for name in spec.entity_offsets
            ]
            text = insert_markers(text, spans, spec.markers(), at)
        if not text.strip():
            raise empty_text(at, str(columns["text"]))
        label = labels.id(as_label(field(record, str(columns["label"]), at, spec)), at)
        examples.append(TextExample(text.strip(), pair, label, at))
    return examples


def record_label_sets(
    records: Records, columns: dict[str, str | None], where: str, spec: TaskSpec, labels: LabelIndex
) -> list[LabelSetExample]:
    """A multi-label task's records: the label field a list of label names, empty for none."""
    examples = []
    for line, record in records:
        at = f"{where}:{line}"
        pair = record_pair(record, columns, at, spec)
        text = str(field(record, str(columns["text"]), at, spec) or "")
        if not text.strip():
            raise empty_text(at, str(columns["text"]))
        names = field(record, str(columns["label"]), at, spec)
        if not isinstance(names, list):
            raise TaskInputError(
                f"{at}: {columns['label']!r} must be a list of label names (a multi_label "
                f"task's labels, [] for none), not {names!r}: fix the row"
            )
        examples.append(LabelSetExample(text.strip(), pair, label_set(names, at, spec, labels)))
    return examples


def label_set(names: list[Any], at: str, spec: TaskSpec, labels: LabelIndex) -> tuple[int, ...]:
    """A multi-label example's label ids, sorted, a name listed twice once; no label at all
    only where the task allows it (`allow_empty_labels`)."""
    if not names and not spec.allow_empty_labels:
        raise TaskInputError(
            f"{at}: the label list is empty, but finetune.catalog.{spec.name}"
            ".allow_empty_labels=false asks every example for a label: fix or remove the row"
        )
    return tuple(sorted({labels.id(as_label(name), at) for name in names}))


def record_sentences(
    records: Records, columns: dict[str, str | None], where: str, spec: TaskSpec, labels: LabelIndex
) -> list[TaggedSentence]:
    sentences = []
    for line, record in records:
        at = f"{where}:{line}"
        tokens = field(record, str(columns["text"]), at, spec)
        tags = field(record, str(columns["label"]), at, spec)
        if not isinstance(tokens, list) or not isinstance(tags, list) or len(tokens) != len(tags):
            raise TaskInputError(
                f"{at}: {columns['text']!r} and {columns['label']!r} must be lists of equal "
                "length (one IOB2 tag per token)"
            )
        if not tokens or any(not str(token).strip() for token in tokens):
            raise TaskInputError(
                f"{at}: {columns['text']!r} must be a non-empty list of non-empty words; fix or "
                "remove the record"
            )
        ids = tuple(tag_id(as_label(tag), at, labels) for tag in tags)
        sentences.append(TaggedSentence(tuple(str(token) for token in tokens), ids))
    return sentences


def record_columns(spec: TaskSpec, names: list[str] | None, where: str) -> dict[str, str | None]:
    """The record fields of the text, pair and label columns (a position needs `names`)."""
    wanted = {"text": spec.text_column, "pair": spec.pair_column, "label": spec.label_column}
    return {
        role: None if column is None else named(column, spec, names, where)
        for role, column in wanted.items()
    }


def examples_of(
    records: Records, columns: dict[str, str | None], where: str, spec: TaskSpec, labels: LabelIndex
) -> Examples:
    """The records as the examples of the task's kind (its `example` in kinds/facts.py)."""
    example = spec.facts.example
    if example == "question":
        return qa_records(records, where, spec)
    if example == "tagged":
        return record_sentences(records, columns, where, spec, labels)
    if example == "label_set":
        return record_label_sets(records, columns, where, spec, labels)
    return record_examples(records, columns, where, spec, labels)


def read_jsonl(path: Path, spec: TaskSpec, labels: LabelIndex) -> Examples:
    """A JSON-lines task file: one example per record."""
    columns = record_columns(spec, None, str(path))
    return examples_of(jsonl_records(path, spec), columns, str(path), spec, labels)


def read_parquet(path: Path, spec: TaskSpec, labels: LabelIndex) -> Examples:
    """A Parquet task file: one example per row, reading only the columns the task names."""
    require_file(path, spec)
    if spec.facts.example == "question":
        names = parquet_columns(path)
        wanted = [name for name in qa_columns(spec).values() if name in names]
        return qa_records(parquet_records(path, wanted), str(path), spec)
    columns = record_columns(spec, parquet_columns(path), str(path))
    present = [column for column in columns.values() if column is not None]
    present += spec.entity_offsets or []
    return examples_of(parquet_records(path, present), columns, str(path), spec, labels)
