"""What `cloze evaluate` needs of a resolved run, checked before any service or stage starts
(no Prefect import here: the CLI checks, then starts the services)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from flows.core.settings import ConfigError
from flows.init_from_config import checkpoint_folder
from flows.plan import RunConfig
from flows.resolve import ResolvedRun
from flows.stages.init_source import HUGGINGFACE_DIR, is_registry_uri
from flows.tracking.links import run_label


def check_evaluable(run: RunConfig) -> None:
    """What `cloze evaluate` needs beyond a valid config: a checkpoint to import, and no
    option that reads a corpus. A problem is a ConfigError naming the key, before any stage."""
    init_from = run.pretrain.init_from
    if init_from is None:
        raise ConfigError(
            "pretrain.init_from is not set: cloze evaluate scores a checkpoint as it is; name "
            "one, pretrain.init_from=<transformers checkpoint folder, Hub name or "
            "models:/NAME@ALIAS>"
        )
    if not is_registry_uri(init_from) and checkpoint_folder(init_from) is None:
        export = Path(init_from) / HUGGINGFACE_DIR
        raise ConfigError(
            f"pretrain.init_from={init_from} is a Cloze pretrain artifact, not a transformers "
            f"checkpoint: evaluate its export, pretrain.init_from={export}"
        )
    if run.tokenizer.extend_vocabulary:
        raise ConfigError(
            f"tokenizer.extend_vocabulary={run.tokenizer.extend_vocabulary} adds corpus words to "
            "the checkpoint's vocabulary, but cloze evaluate reads no corpus: the checkpoint is "
            "scored as it is; drop it"
        )


def evaluate_label(resolved: ResolvedRun, now: datetime | None = None) -> str:
    """`<model>[-<experiment>]-evaluate-<UTC timestamp>`: a pipeline's run name, with `evaluate`
    where the corpus would be (an evaluation reads none)."""
    return run_label(
        resolved.run.overrides, {**resolved.config, "corpus": {"kind": "evaluate"}}, now
    )
