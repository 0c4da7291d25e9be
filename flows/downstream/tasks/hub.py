"""A task from a Hugging Face `datasets` name (needs a hub) or a `save_to_disk` folder.

Rows go through the same checks as GLUE files, so a bad label names the split and row. Class-label
features are read by name (`features[column].names`), so `labels` lists names, not ids. A
multi-label task's rows are records with a list of labels, read as jsonl's are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.downstream.tasks.readers import (
    LabelIndex,
    LabelSetExample,
    TaggedSentence,
    TextExample,
    text_examples,
)
from flows.downstream.tasks.record_readers import record_columns, record_label_sets
from flows.downstream.tasks.spec import TaskInputError, TaskSpec
from flows.downstream.tasks.squad import QAExample, qa_records


def load_split(spec: TaskSpec, split: str) -> Any:
    import datasets

    assert spec.hub_name is not None
    try:
        if Path(spec.hub_name).is_dir():
            loaded = datasets.load_from_disk(spec.hub_name)
            return loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded
        return datasets.load_dataset(spec.hub_name, spec.hub_config, split=split)
    except (OSError, KeyError, ValueError, ConnectionError) as error:
        raise TaskInputError(
            f"finetune.catalog.{spec.name}: cannot load split {split!r} of {spec.hub_name!r} "
            f"({type(error).__name__}: {error}); check hub_name, hub_config and the split names"
        ) from error


def as_text(value: Any, names: list[str] | None) -> str:
    return names[value] if names is not None and isinstance(value, int) else str(value)


def class_names(feature: Any) -> list[str] | None:
    return list(feature.names) if hasattr(feature, "names") else None


def read_hub(
    split: str, spec: TaskSpec, labels: LabelIndex
) -> list[TextExample] | list[TaggedSentence] | list[LabelSetExample] | list[QAExample]:
    """A split of the task's dataset, by its split name (`spec.source` gives the name as is)."""
    dataset = load_split(spec, split)
    where = f"{spec.hub_name}[{split}]"
    columns = list(dataset.column_names)
    if spec.facts.example == "question":  # the squad schema's rows are its records
        return qa_records(((index, row) for index, row in enumerate(dataset)), where, spec)
    if spec.facts.example == "tagged":
        return tagged_rows(dataset, columns, where, spec, labels)
    if spec.facts.example == "label_set":
        column = str(spec.label_column)
        ids = class_names(getattr(dataset.features.get(column), "feature", None))
        records = ((index + 1, named_labels(row, column, ids)) for index, row in enumerate(dataset))
        return record_label_sets(records, record_columns(spec, None, where), where, spec, labels)
    names = {column: class_names(dataset.features[column]) for column in columns}
    rows = (
        (index + 1, [as_text(row[column], names[column]) for column in columns])
        for index, row in enumerate(dataset)
    )
    return text_examples(rows, columns, where, spec, labels)


def named_labels(row: dict[str, Any], column: str, names: list[str] | None) -> dict[str, Any]:
    """The row with its label list's class ids as their names (a `Sequence(ClassLabel)`)."""
    value = row.get(column)
    if names is None or not isinstance(value, list):
        return row
    return {**row, column: [as_text(label, names) for label in value]}


def tagged_rows(
    dataset: Any, columns: list[str], where: str, spec: TaskSpec, labels: LabelIndex
) -> list[TaggedSentence]:
    for column in (spec.text_column, spec.label_column):
        if column not in columns:
            raise TaskInputError(
                f"{where} has no column {column!r} (columns: {', '.join(columns)}); set "
                f"finetune.catalog.{spec.name}.text_column/label_column"
            )
    names = class_names(getattr(dataset.features[spec.label_column], "feature", None))
    sentences = []
    for index, row in enumerate(dataset):
        at = f"{where} row {index}"
        tags = tuple(labels.id(as_text(tag, names), at, "tag") for tag in row[spec.label_column])
        tokens = tuple(str(token) for token in row[spec.text_column])
        sentences.append(TaggedSentence(tokens, tags))
    return sentences
