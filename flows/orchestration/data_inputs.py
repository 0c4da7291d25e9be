"""What data each MLflow run read, for its Dataset column: the corpus shards a training stage
read, the task files a fine-tuning run read, and both on the pipeline's parent run, so a person
can filter runs by the data they used."""

from __future__ import annotations

import hashlib
from pathlib import Path

from flows.core.artifacts import ArtifactRef
from flows.downstream.settings import FinetuneSettings
from flows.downstream.tasks.spec import SPLITS
from flows.tracking.runs import DataInput

DIGEST_LENGTH = 20  # hex digits, as the artifact store's keys (MLflow keeps at most 36)


def shards_input(shards: ArtifactRef) -> DataInput:
    """The shards artifact: its key names its content (corpus, tokenizer and packing)."""
    return DataInput("shards", shards.key, shards.path, "training")


def task_inputs(settings: FinetuneSettings) -> dict[str, list[DataInput]]:
    """Each task's files, by task; a split from the Hub or carved from another has no file."""
    data_dir = settings.resolved_data_dir()
    inputs: dict[str, list[DataInput]] = {}
    for task in settings.plan:
        spec = task.spec
        for split in SPLITS:
            source = spec.source(split, data_dir)
            if isinstance(source, Path) and source.is_file():
                digest = hashlib.sha256(source.read_bytes()).hexdigest()[:DIGEST_LENGTH]
                item = DataInput(f"{spec.name}/{split}", digest, source, split)
                inputs.setdefault(spec.name, []).append(item)
    return inputs
