"""A task's train/validation/test examples, whatever the source, with the sampling the recipe asks.

Validation and test samples are seeded by the pipeline seed only, so every run of a task is
selected and scored on the same examples. The limited-label training sample
(`finetune.train_examples`) is drawn per run seed from the train pool (`train_sample`): both arms of
one seed see the same sample, so the pair stays paired, while the seeds differ in their draw, so
the interval over seeds covers the luck of which examples were labelled, not only training noise.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows.core.logs import warn_once
from flows.corpora.formats import CorpusInputError
from flows.corpora.pydoc_topics_task import LABELS, load_pydoc_topics
from flows.downstream.kinds.base import EncodeJob, RecipeView
from flows.downstream.kinds.registry import kind_of
from flows.downstream.tasks.contained import whole_rows
from flows.downstream.tasks.encoding import STAND_IN_SPECIAL, stand_in_tokenizer
from flows.downstream.tasks.hub import read_hub
from flows.downstream.tasks.readers import (
    LabelIndex,
    LabelSetExample,
    TaggedSentence,
    TextExample,
    read_conll,
    read_glue,
    read_semeval2010,
)
from flows.downstream.tasks.record_readers import read_csv, read_jsonl, read_parquet
from flows.downstream.tasks.spec import SPLITS, TaskInputError, TaskSpec, check_labels
from flows.downstream.tasks.squad import QAExample, read_squad

log = logging.getLogger(__name__)

Example = TextExample | TaggedSentence | QAExample
CARVED_VALIDATION_FRACTION = 0.1


@dataclass(frozen=True)
class Sampling:
    """How many validation and test examples to use (None: all); train: see `train_sample`."""

    validation_examples: int | None
    test_examples: int | None
    seed: int


@dataclass
class TaskData:
    """A task's splits; `labels` in id order, where they came from, and train labels that the
    test split never shows (their test scores are empty: reported, not an error). `pools` holds
    each split's size before `finetune.validation_examples`/`test_examples` capped it; `caps`
    the caps that bit, once the splits are encoded (flows/downstream/finetuning/caps.py)."""

    spec: TaskSpec
    labels: list[str]
    splits: dict[str, list[Any]]
    label_source: str = "config"
    absent_from_test: list[str] = field(default_factory=list)
    pools: dict[str, int] = field(default_factory=dict)
    caps: dict[str, Any] = field(default_factory=dict)
    # A relation task's rows left out per split for a missing or unbalanced marker (markers.py).
    marker_drops: dict[str, Any] = field(default_factory=dict)
    # A question-answering task's splits carved by article or context, and how (qa_splits.py).
    carved: dict[str, str] = field(default_factory=dict)

    def label_record(self) -> dict[str, Any]:
        """The `labels` entry of results.json."""
        return {
            "names": self.labels,
            "source": self.label_source,
            "absent_from_test": self.absent_from_test,
        }


# A split's source: a file's path, or a hub dataset's split name.
Reader = Callable[[Any, TaskSpec, LabelIndex], Iterable[Any]]
# How a split of each task format is read, from a file or a dataset's split name: the one place a
# task's `format` is dispatched on (what a format may hold: TASK_FORMATS in spec.py). A built-in
# task (pydoc_topics) brings its own splits instead.
READERS: dict[str, Reader] = {
    "glue": read_glue,
    "csv": read_csv,
    "conll": read_conll,
    "semeval2010": read_semeval2010,
    "jsonl": read_jsonl,
    "parquet": read_parquet,
    "huggingface": read_hub,
    "squad": read_squad,
}


def read_source(source: Path | str, spec: TaskSpec, labels: LabelIndex) -> list[Any]:
    """One split in the task's format; a corpus-layer error becomes a task error."""
    try:
        return list(READERS[spec.format](source, spec, labels))
    except TaskInputError:
        raise
    except CorpusInputError as error:
        raise TaskInputError(str(error)) from error


def read_split(spec: TaskSpec, split: str, data_dir: Path, labels: LabelIndex) -> list[Any] | None:
    source = spec.source(split, data_dir)
    if source is None:
        return None
    examples = read_source(source, spec, labels)
    if not examples and isinstance(source, Path):
        raise TaskInputError(
            f"{source}: the {split} split of task {spec.name} holds no example; point "
            f"finetune.catalog.{spec.name}.{split} at a file with labelled rows"
        )
    return examples


def pydoc_topics_splits(spec: TaskSpec, seed: int) -> dict[str, list[Any]]:
    data = load_pydoc_topics(spec.min_words, None, seed)
    return {
        split: [TextExample(example.text, None, example.label) for example in examples]
        for split, examples in data.splits.items()
    }


def sample(examples: list[Any], limit: int | None, seed: int) -> list[Any]:
    """A seeded sample, not a prefix: files are often sorted by label or source."""
    if limit is None or len(examples) <= limit:
        return examples
    return random.Random(seed).sample(examples, limit)


def train_sample(pool_size: int, limit: int | None, seed: int) -> list[int] | None:
    """Positions of one seed's labelled sample in the train pool; None: the whole pool."""
    if limit is None or pool_size <= limit:
        return None
    return random.Random(seed).sample(range(pool_size), limit)


def task_labels(spec: TaskSpec, data_dir: Path) -> list[str]:
    """The configured labels, or for `labels: auto` the train split's, sorted: the same file
    gives the same ids on every machine and every run."""
    if spec.labels != "auto":
        return list(spec.labels)
    collector = LabelIndex.collecting(spec)
    read_split(spec, "train", data_dir, collector)
    labels = sorted(collector.seen)
    check_labels(spec, labels)
    return labels


def label_ids(example: Any) -> set[int]:
    if isinstance(example, TaggedSentence):
        return set(example.tags)
    return set(example.labels) if isinstance(example, LabelSetExample) else {example.label}


def absent_from_test(spec: TaskSpec, labels: list[str], test: list[Any]) -> list[str]:
    """Labels the test split never shows; logged, since their per-class scores will be empty."""
    shown = set().union(*(label_ids(example) for example in test))
    absent = [label for index, label in enumerate(labels) if index not in shown]
    if absent:
        warn_once(
            log,
            "task %s: the test split has no example of %s; those labels get no test score",
            spec.name,
            ", ".join(map(repr, absent)),
        )
    return absent


def load_task(spec: TaskSpec, data_dir: Path, sampling: Sampling) -> TaskData:
    """Validation and test sampled; train left whole, as the pool `train_sample` draws from."""
    if spec.task_format.source == "built_in":
        splits = pydoc_topics_splits(spec, sampling.seed)
        labels = list(LABELS)
    else:
        labels = task_labels(spec, data_dir)
        index = LabelIndex(spec, labels)
        read = {split: read_split(spec, split, data_dir, index) for split in SPLITS}
        splits = {split: examples for split, examples in read.items() if examples is not None}
    kind = kind_of(spec.kind)
    notes = kind.prepare_splits(spec, splits, data_dir, sampling.seed)
    if spec.drop_contained_rows:
        whole = whole_rows(splits["train"])
        log.info(
            "task %s: %d of %d train rows are spans of longer rows, dropped (drop_contained_rows)",
            spec.name,
            len(splits["train"]) - len(whole),
            len(splits["train"]),
        )
        splits["train"] = whole
    pools = {}
    if "validation" not in splits:
        shuffled = random.Random(sampling.seed).sample(splits["train"], len(splits["train"]))
        carved = pools["validation"] = max(1, round(CARVED_VALIDATION_FRACTION * len(shuffled)))
        if sampling.validation_examples is not None:
            carved = min(carved, sampling.validation_examples)
        splits["validation"], splits["train"] = shuffled[:carved], shuffled[carved:]
    for split, examples in splits.items():
        if not examples:
            raise TaskInputError(
                f"task {spec.name}: the {split} split is empty; give it labelled examples "
                f"(finetune.catalog.{spec.name}.{split})"
            )
    pools.setdefault("validation", len(splits["validation"]))
    pools.update(train=len(splits["train"]), test=len(splits["test"]))
    splits["validation"] = sample(splits["validation"], sampling.validation_examples, sampling.seed)
    splits["test"] = sample(splits["test"], sampling.test_examples, sampling.seed)
    absent = absent_from_test(spec, labels, splits["test"]) if kind.has_labels else []
    source = "train split" if spec.labels == "auto" else "config"
    ordered = {split: splits[split] for split in SPLITS}
    sizes = {split: pools[split] for split in SPLITS}
    return TaskData(
        spec, labels, ordered, source, absent, sizes, notes.marker_drops, carved=notes.carved
    )


def source_fingerprint(spec: TaskSpec, data_dir: Path) -> dict[str, str | None]:
    """What the stage key needs to know about the data: file contents, never their paths."""
    fingerprint: dict[str, str | None] = {}
    for split in SPLITS:
        source = spec.source(split, data_dir)
        if isinstance(source, Path):
            try:
                fingerprint[split] = hashlib.sha256(source.read_bytes()).hexdigest()
            except FileNotFoundError:
                raise TaskInputError(
                    f"{source} does not exist; fix finetune.catalog.{spec.name}.{split}, or set "
                    "CLOZE_DATA_DIR (or finetune.data_dir) to the folder that holds the data"
                ) from None
        else:
            fingerprint[split] = source
    return fingerprint


def example_texts(example: Example) -> list[str]:
    """The text an example shows a model: its sentence (and pair), or its words."""
    if isinstance(example, TaggedSentence):
        return [" ".join(example.tokens)]
    if isinstance(example, QAExample):
        return [example.question, example.context]
    return [example.text] if example.pair is None else [example.text, example.pair]


def check_tasks(
    tasks: list[tuple[TaskSpec, RecipeView, Sampling]], data_dir: Path
) -> dict[str, int]:
    """Every task file opened, parsed and checked (columns, labels, splits, empty texts and words,
    a relation's markers) before any stage runs, so a bad one costs seconds, not a pretraining
    run; then the first row of each split is encoded, through the task kind's own `encode` as
    the stage encodes, at the recipe's `max_length` with a stand-in tokenizer, as the run's
    own is not trained yet. Hub datasets by name are left to the stage: fetching them is the
    stage's work. Returns the train pool of each task read."""
    pools = {}
    for spec, recipe, sampling in tasks:
        if spec.task_format.source == "built_in":
            continue  # read from the installed Python's documentation
        if spec.task_format.source == "hub" and not Path(spec.hub_name or "").is_dir():
            continue
        data = load_task(spec, data_dir, sampling)
        pools[spec.name] = data.pools["train"]
        first_rows = {name: examples[:1] for name, examples in data.splits.items()}
        tokenizer = stand_in_tokenizer(recipe.max_length)
        special, length = STAND_IN_SPECIAL, recipe.max_length
        job = EncodeJob(
            spec, recipe, data.labels, first_rows, tokenizer, special, True, length, True
        )
        kind_of(spec.kind).encode(job)
    return pools
