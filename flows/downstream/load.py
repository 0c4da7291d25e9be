"""A task's train/validation/test examples, whatever the source, with the sampling the recipe asks.

Validation and test samples are seeded by the pipeline seed only, so every run of a task is
selected and scored on the same examples. The limited-label training sample
(`finetune.train_examples`) is drawn per run seed from the train pool (`train_sample`): both arms of
one seed see the same sample, so the pair stays paired, while the seeds differ in their draw, so
the interval over seeds covers the luck of which examples were labelled, not only training noise.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.corpora.pydoc_topics_task import LABELS, load_pydoc_topics
from flows.downstream.hub import read_hub
from flows.downstream.readers import TaggedSentence, TextExample, read_conll, read_glue
from flows.downstream.spec import SPLITS, TaskInputError, TaskSpec

Example = TextExample | TaggedSentence
CARVED_VALIDATION_FRACTION = 0.1


@dataclass(frozen=True)
class Sampling:
    """How many validation and test examples to use (None: all); train: see `train_sample`."""

    validation_examples: int | None
    test_examples: int | None
    seed: int


@dataclass
class TaskData:
    spec: TaskSpec
    labels: list[str]
    splits: dict[str, list[Any]]


def read_split(spec: TaskSpec, split: str, data_dir: Path) -> list[Any] | None:
    source = spec.source(split, data_dir)
    if source is None:
        return None
    if spec.format == "huggingface":
        return list(read_hub(spec, str(source)))
    path = Path(source)
    examples: list[Any] = read_glue(path, spec) if spec.format == "glue" else read_conll(path, spec)
    if not examples:
        raise TaskInputError(
            f"{path}: the {split} split of task {spec.name} holds no example; point "
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


def load_task(spec: TaskSpec, data_dir: Path, sampling: Sampling) -> TaskData:
    """Validation and test sampled; train left whole, as the pool `train_sample` draws from."""
    if spec.format == "pydoc_topics":
        splits = pydoc_topics_splits(spec, sampling.seed)
        labels = list(LABELS)
    else:
        read = {split: read_split(spec, split, data_dir) for split in SPLITS}
        splits = {split: examples for split, examples in read.items() if examples is not None}
        labels = list(spec.labels)
    if "validation" not in splits:
        shuffled = random.Random(sampling.seed).sample(splits["train"], len(splits["train"]))
        carved = max(1, round(CARVED_VALIDATION_FRACTION * len(shuffled)))
        if sampling.validation_examples is not None:
            carved = min(carved, sampling.validation_examples)
        splits["validation"], splits["train"] = shuffled[:carved], shuffled[carved:]
    for split, examples in splits.items():
        if not examples:
            raise TaskInputError(
                f"task {spec.name}: the {split} split is empty; give it labelled examples "
                f"(finetune.catalog.{spec.name}.{split})"
            )
    splits["validation"] = sample(splits["validation"], sampling.validation_examples, sampling.seed)
    splits["test"] = sample(splits["test"], sampling.test_examples, sampling.seed)
    return TaskData(spec, labels, {split: splits[split] for split in SPLITS})


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
