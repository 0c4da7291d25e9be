"""What `cloze evaluate` needs of a resolved run, checked before any service or stage starts
(no Prefect import here: the CLI checks, then starts the services)."""

from __future__ import annotations

from datetime import datetime

from flows.core.settings import ConfigError
from flows.resolve import ResolvedRun
from flows.stages.init_source import HUGGINGFACE_DIR
from flows.tracking.links import run_label


def check_evaluable(resolved: ResolvedRun) -> None:
    """What `cloze evaluate` needs beyond a valid config: a checkpoint to import (or a registry
    URI that names one), and no option that reads a corpus. A problem is a ConfigError naming
    the key, before any stage."""
    run, init = resolved.run, resolved.init
    if init.kind == "scratch":
        raise ConfigError(
            "pretrain.init_from is not set: cloze evaluate scores a checkpoint as it is; name "
            "one, pretrain.init_from=<transformers checkpoint folder, Hub name or "
            "models:/NAME@ALIAS>"
        )
    if init.kind == "artifact":
        export = f"{init.path}/{HUGGINGFACE_DIR}"
        raise ConfigError(
            f"pretrain.init_from={init.path} is a Cloze pretrain artifact, not a transformers "
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
