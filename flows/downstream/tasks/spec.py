"""What a downstream task is, as config: where its data lives, how to read it, what to score.

Every task, built in or user-defined, is one entry of `finetune.catalog`; the stage never special-
cases a task name, so a user adds a task with a YAML block and no code.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, model_validator
from pydantic_core import PydanticCustomError

from flows.core.keys import opt_ins_at_default
from flows.core.paths import REPO_ROOT
from flows.core.settings import ConfigError, Settings, bounds, one_of, settings_from
from flows.corpora.formats import CorpusInputError
from flows.downstream.kinds.facts import KIND_FACTS, KindFacts

KINDS = tuple(KIND_FACTS)


@dataclass(frozen=True)
class TaskFormat:
    """What a task `format` can hold and where its splits come from. flows/downstream/tasks/load.py
    reads each through its one table of readers (`READERS`), keyed like `TASK_FORMATS`."""

    kinds: tuple[str, ...] = KINDS
    # files: paths under the data dir; hub: a `datasets` name and its split names; built_in: the
    # task brings its own splits and labels.
    source: Literal["files", "hub", "built_in"] = "files"
    # Records of named fields: a token task's `tokens` and `tags` lists, a relation's offsets.
    records: bool = False


TASK_FORMATS = {
    "pydoc_topics": TaskFormat(("classification",), source="built_in"),
    "glue": TaskFormat(("classification", "relation")),
    "csv": TaskFormat(("classification", "relation", "multi_label")),
    "conll": TaskFormat(("token_classification",)),
    "semeval2010": TaskFormat(("relation",)),
    "jsonl": TaskFormat(records=True),
    "parquet": TaskFormat(records=True),
    "huggingface": TaskFormat(source="hub"),
    # The official SQuAD JSON, v1.1 or v2.0 (flows/downstream/tasks/squad.py).
    "squad": TaskFormat(("question_answering",)),
}
FORMATS = tuple(TASK_FORMATS)
METRICS = {kind: facts.metrics for kind, facts in KIND_FACTS.items()}
SPLITS = ("train", "validation", "test")
ARMS = ("pretrained", "random_init")
STUDENT_ARM = "student"  # a third arm when the run distilled a student (flows/stages/distill.py)
BASE_ARM = "base"  # a third arm when the run continued a checkpoint: the checkpoint, not continued
# Task fields the finetune key holds only when set (TaskSpec.key_record).
OPT_IN_FIELDS = (
    "drop_contained_rows",
    "entity_markers",
    "entity_offsets",
    "negative_label",
    "label_separator",
    "allow_empty_labels",
)
# A multi-label task's fields (kind: multi_label): every other kind leaves them at their defaults.
LABEL_SET_FIELDS = ("label_separator", "allow_empty_labels")
# Fields only a question-answering task reads: out of every other task's key.
QA_FIELDS = ("qa_columns", "unanswerable")
# A question-answering task's decoding, in its key (none before 2): 2 may abstain on every
# question when that scores best on validation, and records each run's null-score threshold;
# 3 abstains on every test question when that scores best on validation (threshold -inf), breaks
# ties of the metric on validation span F1, and scores the span skill.
QA_DECODING = 3
# What a task of each kind is compared against besides random init
# (flows/downstream/finetuning/baselines.py).
BASELINES = {kind: facts.baselines for kind, facts in KIND_FACTS.items()}


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
    for `format: huggingface`, split names. A missing `validation` is carved, seeded, out of train
    (a question-answering task's by article or context, and its `test` too when missing:
    flows/downstream/tasks/qa_splits.py);
    GLUE's test files are unlabelled, so its presets score on the dev file as `test`.
    `labels: auto` takes the label set from the train split, sorted
    (flows/downstream/tasks/load.py).
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
    # phrases of their parse trees; flows/downstream/tasks/contained.py).
    drop_contained_rows: bool = False
    # Relation extraction (kind: relation). `entity_markers`: the inline markers around each
    # entity, [open, close] per entity, in the order the head reads them (SemEval's
    # [[<e1>, </e1>], [<e2>, </e2>]]; ChemProt's typed [["<<", ">>"], ["[[", "]]"]]). Each becomes
    # a token of its own (flows/downstream/tasks/relation.py). `entity_offsets` instead: the record
    # fields (jsonl, parquet) holding each entity's [start, end) character offsets in the text,
    # where the markers are inserted ([E1] ... [/E1] unless `entity_markers` names them).
    entity_markers: list[list[str]] | None = None
    entity_offsets: list[str] | None = None
    # The label of a pair without a relation ("Other", "false"), left out of the relation F1s.
    negative_label: str | None = None
    # Question answering (kind: question_answering). `qa_columns`: record fields of the roles
    # id, title, question, context, answers where they are not so named (jsonl, parquet, hub).
    # `unanswerable`: true asks for SQuAD 2.0's no-answer prediction with its null-score
    # threshold chosen on validation (refused for a v1.1 file); null: as the train split holds
    # unanswerable questions or not; false: always answer; drop: answerable-only, unanswerable
    # questions left out of every split (counted in one warning per file), always answer.
    qa_columns: dict[str, str] = Field(default_factory=dict)
    unanswerable: bool | Literal["drop"] | None = None
    # Multi-label classification (kind: multi_label). `label_separator`: what separates the label
    # names in a csv row's label column ("|" reads `fever|cough`; an empty cell: no label); records
    # (jsonl, parquet) hold a list instead. `allow_empty_labels: false` refuses an example with no
    # label, naming its file and line (notes that must each carry a code).
    label_separator: str | None = None
    allow_empty_labels: bool = True
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
        kind; a kind without accuracy is scored on its first metric (entity F1, SQuAD's F1,
        micro-F1), and jsonl/parquet read a token classification's `tokens` and `tags` lists."""
        if not isinstance(data, dict):
            return data
        known = TASK_FORMATS.get(str(data.get("format")))
        kinds = known.kinds if known else KINDS
        if "kind" not in data and len(kinds) == 1:
            data = {**data, "kind": kinds[0]}
        facts = KIND_FACTS.get(str(data.get("kind")))
        if facts and "accuracy" not in facts.metrics:  # the field's default fits no metric listed
            data = {"metric": facts.metrics[0], **data}
        if facts and known and known.records:
            data = {**facts.record_columns, **data}
        return data

    @model_validator(mode="after")
    def _fits_together(self) -> TaskSpec:
        key = f"finetune.catalog.{self.name}"
        if self.kind not in self.task_format.kinds:
            raise ConfigError(
                f"{key}: format {self.format!r} cannot be kind {self.kind!r} ({what_holds_what()})"
            )
        if self.metric not in METRICS[self.kind]:
            raise ConfigError(f"{key}.metric={self.metric!r} must be one of {METRICS[self.kind]}")
        self._check_relation(key)
        self._check_label_sets(key)
        if not self.facts.has_labels:
            self._check_question_answering(key)
        elif self.labels != "auto":
            check_labels(self, self.labels)
        if self.task_format.source != "built_in":
            self._check_sources(key)
        if self.drop_contained_rows and (not self.facts.single_texts or self.pair_column):
            raise ConfigError(
                f"{key}.drop_contained_rows compares single texts: it applies to classification "
                "tasks without a pair_column; remove it from this task"
            )
        return self

    def _check_question_answering(self, key: str) -> None:
        """An answer is a span of the context: a QA task has no label set."""
        if self.labels:
            raise ConfigError(
                f"{key}.labels: a question-answering task's answers are spans of the context, "
                "not labels; remove labels"
            )

    def _check_relation(self, key: str) -> None:
        """A relation task marks its entities, inline or by offsets; other kinds mark none."""
        if not self.facts.marks_entities:
            for name in ("entity_markers", "entity_offsets", "negative_label"):
                if getattr(self, name) is not None:
                    raise ConfigError(
                        f"{key}.{name} applies to relation tasks, but task {self.name} is "
                        f"{self.kind}: set {key}.kind=relation, or remove {name}"
                    )
            return
        if self.entity_markers is None and self.entity_offsets is None:
            raise ConfigError(
                f"{key}.entity_markers is not set: a relation task needs its entities marked, "
                f"inline ({key}.entity_markers=[[<e1>,</e1>],[<e2>,</e2>]]) or by character "
                f"offsets in jsonl or parquet records ({key}.entity_offsets=[head,tail])"
            )
        if self.pair_column is not None:
            raise ConfigError(
                f"{key}.pair_column: a relation is read from one text holding its entities' "
                "markers; remove pair_column (or mark the entities in one text column)"
            )
        if self.entity_offsets is not None and not self.task_format.records:
            raise ConfigError(
                f"{key}.entity_offsets reads offsets from records: format {self.format!r} has "
                f"none; use format jsonl or parquet, or mark the entities in the text "
                f"({key}.entity_markers)"
            )
        check_markers(self.markers(), self.entity_offsets, key)

    def _check_label_sets(self, key: str) -> None:
        """A csv column of label lists names its separator; nothing else has one to name."""
        if self.facts.example != "label_set":
            at_default = opt_ins_at_default(self, LABEL_SET_FIELDS)
            set_off = [name for name in LABEL_SET_FIELDS if name not in at_default]
            if set_off:
                raise ConfigError(
                    f"{key}.{set_off[0]} applies to multi_label tasks, but task {self.name} is "
                    f"{self.kind}: set {key}.kind=multi_label, or remove {set_off[0]}"
                )
            return
        if self.format == "csv" and not self.label_separator:
            missing = "empty" if self.label_separator == "" else "not set"
            raise ConfigError(
                f"{key}.label_separator is {missing}: a multi_label csv task holds each row's "
                "label names in one column, separated; name the separator "
                f"({key}.label_separator='|'; in a task file: label_separator: \"|\")"
            )
        if self.format != "csv" and self.label_separator is not None:
            raise ConfigError(
                f"{key}.label_separator splits a csv column of label names, but format "
                f"{self.format!r} reads a list of them per record: remove label_separator"
            )

    @property
    def task_format(self) -> TaskFormat:
        return TASK_FORMATS[self.format]

    @property
    def facts(self) -> KindFacts:
        """What the task's kind implies for its config and records (kinds/facts.py)."""
        return KIND_FACTS[self.kind]

    def markers(self) -> list[tuple[str, str]]:
        """Each entity's (open, close) markers, in the head's order."""
        if self.entity_markers is not None:
            return [
                (pair[0], pair[1]) if len(pair) == 2 else ("", "") for pair in self.entity_markers
            ]
        count = len(self.entity_offsets or [])
        return [(f"[E{index}]", f"[/E{index}]") for index in range(1, count + 1)]

    def key_record(self) -> dict[str, Any]:
        """The spec as the finetune stage's key holds it: an opt-in field that is off stays out,
        so adding one moves no existing task's key; a kind's results version (kinds/facts.py)
        enters its tasks' keys alone."""
        off = opt_ins_at_default(self, OPT_IN_FIELDS)
        if not self.facts.decodes_spans:
            version = self.facts.results_version
            kept = self.model_dump(exclude={"recipe", *off, *QA_FIELDS})
            return kept if version is None else {**kept, "kind_version": version}
        return {**self.model_dump(exclude={"recipe", *off}), "decoding": QA_DECODING}

    def _check_sources(self, key: str) -> None:
        if self.train is None:
            raise ConfigError(f"{key}: set {key}.train and {key}.test (validation is optional)")
        if self.test is None and not self.facts.decodes_spans:
            raise ConfigError(f"{key}: set {key}.train and {key}.test (validation is optional)")
        if self.task_format.source == "hub" and not self.hub_name:
            raise ConfigError(f"{key}.hub_name must name the dataset (e.g. nyu-mll/glue)")

    def source(self, split: str, data_dir: Path) -> Path | str | None:
        """Where a split comes from: a resolved file, a hub split name, or None (carve/absent)."""
        value = getattr(self, split)
        if value is None or self.task_format.source == "hub":
            return value
        path = Path(os.path.expanduser(value))
        return path if path.is_absolute() else data_dir / path


def what_holds_what() -> str:
    """`glue holds classification or relation; ...; jsonl, parquet and huggingface hold any kind`"""
    held = [
        f"{name} holds {listed(f.kinds, 'or')}"
        for name, f in TASK_FORMATS.items()
        if f.kinds != KINDS
    ]
    anything = [name for name, f in TASK_FORMATS.items() if f.kinds == KINDS]
    return "; ".join(held) + f"; {listed(anything, 'and')} hold any kind"


def listed(words: Sequence[str], last: str) -> str:
    """`a`, `a or b`, `a, b or c`."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


def check_markers(markers: list[tuple[str, str]], offsets: list[str] | None, key: str) -> None:
    """Two or more entities, each an open and a close marker; every marker distinct and none
    inside another, so each is found in a text as itself alone."""
    name = f"{key}.entity_markers"
    if len(markers) < 2 or any(not open_ or not close for open_, close in markers):
        raise ConfigError(
            f"{name} must list an [open, close] pair of non-empty markers per entity, at least "
            "two entities (e.g. [[<e1>,</e1>],[<e2>,</e2>]])"
        )
    flat = [marker for pair in markers for marker in pair]
    for index, marker in enumerate(flat):
        inside = [other for other in flat[:index] + flat[index + 1 :] if marker in other]
        if inside:
            raise ConfigError(
                f"{name}: marker {marker!r} occurs within {inside[0]!r}; every marker must be "
                "distinct and none part of another"
            )
    if offsets is not None and len(offsets) != len(markers):
        raise ConfigError(
            f"{key}.entity_offsets names {len(offsets)} entities and {name} {len(markers)}: "
            "give one marker pair per offsets field"
        )


def check_labels(spec: TaskSpec, labels: list[str]) -> None:
    """A label set fits the task: listed in config, or found in train for `labels: auto`."""
    key = f"finetune.catalog.{spec.name}"
    found = " (found in the train split)" if spec.labels == "auto" else ""
    if spec.task_format.source == "built_in" and not labels:
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
    required = spec.facts.required_label
    if required is not None and required not in labels:
        raise ConfigError(
            f"{key}.labels={labels}{found} must include {required!r} for IOB2 tagging"
        )
    if spec.negative_label is not None and spec.negative_label not in labels:
        raise ConfigError(
            f"{key}.negative_label={spec.negative_label!r} is not among the labels {labels}"
            f"{found}; name the label of pairs without a relation (e.g. Other), or set it to "
            "null to score every label"
        )


def recipe_key(task: str, field: str, set_by_task: Collection[str]) -> str:
    """The config key that sets a recipe field for `task`: its catalog entry's, if it sets it."""
    if field in set_by_task:
        return f"finetune.catalog.{task}.recipe.{field}"
    return f"finetune.{field}"


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
