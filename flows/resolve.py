"""Where a run enters, its config is resolved once: composed, the checkpoint adopted, validated.

`python -m flows`, a served run (the pipeline deployment, the domain refresh), the refresh CLI,
the lift experiments and the torchrun entry each call `resolve_run` once per run; the pipeline and
the stages read what it returns. Nothing downstream composes Hydra, adopts a checkpoint or
validates the config again, so a note is printed once and a bad key fails once, before any
service starts.

One case resolves in two steps: `pretrain.init_from=models:/<name>@<alias>`. Only the MLflow
registry can say which checkpoint that URI holds, and the tracker that asks it exists only once
the services run (the pipeline opens it). Until then the config is validated as composed, so a bad
key still fails first; the pipeline then adopts the registry's checkpoint and validates that once
(`ResolvedRun.from_registry`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.core.config import compose_config
from flows.core.logs import new_run_warnings
from flows.core.settings import ConfigError
from flows.corpora.general_text import check_general_text, check_held_out
from flows.plan import STAGES, RunConfig, load_run_config
from flows.stages.init_point import SCRATCH, InitPoint, adopt_init
from flows.stages.training_types import GENERAL_VALIDATION_KEY


@dataclass(frozen=True)
class ResolvedRun:
    """One run's config, resolved: what its entry point hands the pipeline."""

    config: dict[str, Any]
    """The adopted config as a plain dict: a Prefect flow's parameter, logged whole to MLflow."""
    run: RunConfig
    """The same, typed and validated: what the stages read."""
    notes: tuple[str, ...] = ()
    """What adopting a checkpoint changed, to print once before any stage."""
    until: str | None = STAGES[-1]
    """The last stage the run reaches; None for a tool that runs none (it reads the paths)."""
    pretraining: bool = True
    """False for `cloze evaluate`, which builds no shards: `shards.*` is not checked."""
    init: InitPoint = SCRATCH
    """Where pretraining starts, resolved with the config: what the pipeline and stages read."""

    @property
    def registry_uri(self) -> str | None:
        """The `models:/` URI still to adopt once the pipeline's tracker can look it up."""
        return self.init.registry_uri if self.init.kind == "registry" else None

    def from_registry(self, resolve: Callable[[str], Path]) -> ResolvedRun:
        """The registry's checkpoint adopted and validated (see the module's docstring)."""
        return resolve_run(self.config, self.until, resolve, self.pretraining)


def resolve_run(
    source: Sequence[str] | Mapping[str, Any],
    until: str | None = STAGES[-1],
    resolve: Callable[[str], Path] | None = None,
    pretraining: bool = True,
) -> ResolvedRun:
    """`source` (Hydra overrides, or a config composed from them) as the run it configures.

    Composed from `conf/` once; the checkpoint `pretrain.init_from` names adopted once (a
    `models:/` URI only given `resolve`, the pipeline's registry lookup) and its starting point
    resolved (flows/stages/init_point.py); validated whole:
    every section, `until` against the config, the task files of a run that fine-tunes and the
    general validation text of one that pretrains (read now: a bad one costs seconds, not a
    pretraining). `pretraining=False` (`cloze evaluate`) leaves out what only a run that builds
    shards needs: its rows against the model's positions, and the general validation text. A
    problem is a ConfigError (or CorpusInputError) naming the key.
    """
    if until is not None and until not in STAGES:
        raise ConfigError(f"until={until!r} must be one of {STAGES}")
    config = dict(source) if isinstance(source, Mapping) else compose_config(list(source))
    adopted, notes, init = adopt_init(config, resolve)
    run = load_run_config(adopted)
    if pretraining:
        run.check_rows_fit()
    if until == "distill" and run.distill is None:
        raise ConfigError(
            "until=distill: this config has no distill stage; add the override distill=default "
            "(distils this run's model) or pick experiment=distilbert_smoke"
        )
    if until == STAGES[-1]:
        new_run_warnings()  # what the check says about the task files, the stage won't repeat
        run.finetune.check_task_files(run.seed)
    general = run.pretrain.general(run.corpus)
    if pretraining and general is not None and until in STAGES[STAGES.index("pretrain") :]:
        check_general_text(general.corpus(), GENERAL_VALIDATION_KEY)
        check_held_out(list(general.paths), GENERAL_VALIDATION_KEY, run.corpus)
    return ResolvedRun(adopted, run, tuple(notes), until, pretraining, init)
