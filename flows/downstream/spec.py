"""What a downstream task is, as config: where its data lives, how to read it, what to score.

Every task, built in or user-defined, is one entry of `finetune.catalog`; the stage never special-
cases a task name, so a user adds a task with a YAML block and no code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, model_validator
from pydantic_core import PydanticCustomError

from flows.core.paths import REPO_ROOT
from flows.core.settings import ConfigError, Settings, bounds, one_of, settings_from
from flows.corpora.formats import CorpusInputError

FORMATS = ("pydoc_topics", "glue", "conll", "huggingface", "jsonl", "csv", "parquet")
# Which kinds each file format can hold; jsonl and parquet hold token lists as well as texts.
FORMAT_KINDS = {
    "pydoc_topics": ("classification",),
    "glue": ("classification",),
    "csv": ("classification",),
    "conll": ("token_classification",),
}
KINDS = ("classification", "token_classification")
CLASSIFICATION_METRICS = ("accuracy", "macro_f1", "mcc", "f1")
TOKEN_METRICS = ("entity_f1", "entity_precision", "entity_recall")
SPLITS = ("train", "validation", "test")
ARMS = ("pretrained", "random_init")
STUDENT_ARM = "student"  # a third arm when the run distilled a student (flows/stages/distill.py)
BASE_ARM = "base"  # a third arm when the run continued a checkpoint: the checkpoint, not continued
# Task fields the finetune key holds only when set (TaskSpec.key_record).
OPT_IN_FIELDS = ("drop_contained_rows",)
# What a task of each kind is compared against besides random init (flows/downstream/baselines.py).
BASELINES = {
    "classification": ("majority", "tfidf_logreg"),
    "token_classification": ("seen_entities",),
}


class TaskInputError(CorpusInputError):
    """A task's data file cannot be used as configured; the message names file, line and fix."""


def default_data_dir() -> Path:
    """`$CLOZE_DATA_DIR`, else `../shared/data` beside the repository (as benchmarks/ use)."""
    configured = os.environ.get("CLOZE_DATA_DIR")
    if configured:
        return Path(configured)
    return REPO_ROOT.parent / "shared" / "data"


def _column(value: Any) -> str | int:
    """A header name or a 0-based position."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise PydanticCustomError("column_type", "must be a column name or a 0-based position")
    return value


Column = Annotated[str | int, PlainValidator(_column)]


class TaskSpec(Settings):
    """`finetune.catalog.<name>`: one task's data and metric.

    `train`/`validation`/`test` are file paths (relative ones resolve against the data dir) or,
    for `format: huggingface`, split names. A missing `validation` is carved, seeded, out of train;
    GLUE's test files are unlabelled, so its presets score on the dev file as `test`.
    `labels: auto` takes the label set from the train split, sorted (flows/downstream/load.py).
    `recipe` sets fields of the finetune recipe for this task alone (flows/downstream/settings.py).
    """

    section = "finetune.catalog.<task>"
    name: str
    format: Annotated[str, one_of(FORMATS)]
    kind: Annotated[str, one_of(KINDS)] = "classification"
    metric: str = "accuracy"
    labels: list[str] | Literal["auto"] = Field(default_factory=list)
    train: str | None = None
    validation: str | None = None
    test: str | None = None
    header: bool = True
    text_column: Column = "sentence"
    pair_column: Column | None = None
    label_column: Column = "label"
    hub_name: str | None = None
    hub_config: str | None = None
    min_words: Annotated[int, bounds(ge=1)] = 5
    # Keep only train rows that are not spans of longer rows (SST: whole sentences, not the
    # phrases of their parse trees; flows/downstream/contained.py).
    drop_contained_rows: bool = False
    recipe: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _no_recipe(cls, data: Any) -> Any:
        """`recipe: null` drops the task's own recipe fields (a Hydra merge cannot delete keys)."""
        if isinstance(data, dict) and "recipe" in data and data["recipe"] is None:
            return {**data, "recipe": {}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _kind_defaults(cls, data: Any) -> Any:
        """What a kind implies unless told: a format that holds one kind only (conll) is that
        kind; token classification is scored on entity F1, and jsonl/parquet read its `tokens`
        and `tags` lists."""
        if not isinstance(data, dict):
            return data
        kinds = FORMAT_KINDS.get(str(data.get("format")), KINDS)
        if "kind" not in data and len(kinds) == 1:
            data = {**data, "kind": kinds[0]}
        if data.get("kind") == "token_classification":
            data = {"metric": TOKEN_METRICS[0], **data}
            if data.get("format") in ("jsonl", "parquet"):
                data = {"text_column": "tokens", "label_column": "tags", **data}
        return data

    @model_validator(mode="after")
    def _fits_together(self) -> TaskSpec:
        key = f"finetune.catalog.{self.name}"
        kinds = FORMAT_KINDS.get(self.format, KINDS)
        if self.kind not in kinds:
            raise ConfigError(
                f"{key}: format {self.format!r} cannot be kind {self.kind!r}; conll files are "
                "token_classification, glue, csv and pydoc_topics are classification, jsonl "
                "and parquet are either"
            )
        allowed = TOKEN_METRICS if self.kind == "token_classification" else CLASSIFICATION_METRICS
        if self.metric not in allowed:
            raise ConfigError(f"{key}.metric={self.metric!r} must be one of {allowed}")
        if self.labels != "auto":
            check_labels(self, self.labels)
        if self.format != "pydoc_topics":
            self._check_sources(key)
        if self.drop_contained_rows and (self.kind != "classification" or self.pair_column):
            raise ConfigError(
                f"{key}.drop_contained_rows compares single texts: it applies to classification "
                "tasks without a pair_column; remove it from this task"
            )
        return self

    def key_record(self) -> dict[str, Any]:
        """The spec as the finetune stage's key holds it: an opt-in field that is off stays out,
        so adding one moves no existing task's key."""
        off = {name for name in OPT_IN_FIELDS if not getattr(self, name)}
        return self.model_dump(exclude={"recipe", *off})

    def _check_sources(self, key: str) -> None:
        if self.train is None or self.test is None:
            raise ConfigError(f"{key}: set {key}.train and {key}.test (validation is optional)")
        if self.format == "huggingface" and not self.hub_name:
            raise ConfigError(f"{key}.hub_name must name the dataset (e.g. nyu-mll/glue)")

    def source(self, split: str, data_dir: Path) -> Path | str | None:
        """Where a split comes from: a resolved file, a hub split name, or None (carve/absent)."""
        value = getattr(self, split)
        if value is None or self.format == "huggingface":
            return value
        path = Path(os.path.expanduser(value))
        return path if path.is_absolute() else data_dir / path


def check_labels(spec: TaskSpec, labels: list[str]) -> None:
    """A label set fits the task: listed in config, or found in train for `labels: auto`."""
    key = f"finetune.catalog.{spec.name}"
    found = " (found in the train split)" if spec.labels == "auto" else ""
    if spec.format == "pydoc_topics" and not labels:
        return  # the built-in task brings its own labels
    if len(labels) < 2:
        raise ConfigError(
            f"{key}.labels must list at least 2 labels (the label vocabulary); got {labels}{found}"
        )
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{key}.labels={labels} lists a label twice")
    if spec.metric == "f1" and len(labels) != 2:
        raise ConfigError(
            f"{key}.metric=f1 is binary F1: {key}.labels={labels}{found} needs exactly 2 labels"
        )
    if spec.kind == "token_classification" and "O" not in labels:
        raise ConfigError(f"{key}.labels={labels}{found} must include 'O' for IOB2 tagging")


def task_specs(catalog: dict[str, Any], names: list[str]) -> list[TaskSpec]:
    """The specs of `finetune.tasks`, validated; an unknown name lists the known ones."""
    specs = []
    for name in names:
        if name not in catalog:
            raise ConfigError(
                f"finetune.tasks: {name!r} is not in finetune.catalog (known: "
                f"{', '.join(sorted(catalog))}); add finetune.catalog.{name} or pick a known task"
            )
        entry = catalog[name]
        if not isinstance(entry, dict):
            raise ConfigError(f"finetune.catalog.{name} must be a mapping of task settings")
        specs.append(settings_from(TaskSpec, {**entry, "name": name}, f"finetune.catalog.{name}"))
    return specs
