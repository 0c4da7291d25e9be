"""`torchrun [...] -m flows.orchestration.rank_entry [--prepare-only] OVERRIDE ...`: one rank.

The entry point for several nodes (infra/multinode.md): torchrun, `srun` or a Kubernetes Job
starts it once per rank with the same overrides as `python -m flows`. Every rank composes the
same config and reuses the tokenizer and shards stages (file-locked in the shared artifact store);
then all ranks train. Rank zero alone opens an MLflow run and publishes the artifact, and no rank
starts a Prefect flow: a flow per rank, each with its own runs, is what this entry point avoids.

`--prepare-only` (one process, before the training job) builds the tokenizer and shards, so the
ranks of the training job only read them.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.core.cli import fail
from flows.core.logs import setup_logging
from flows.core.paths import RunPaths
from flows.core.redaction import redact_secrets
from flows.core.settings import ConfigError
from flows.plan import PipelinePlan, start_services
from flows.resolve import resolve_run
from flows.stages.pretrain import pretrain
from flows.stages.shards.stage import build_shards
from flows.stages.tokenizer import train_tokenizer
from flows.tracking.runs import RunHandle, Tracker
from flows.training.launch import is_rank_zero, launched_per_rank

log = logging.getLogger("cloze.pretrain_rank")


def prepare(plan: PipelinePlan, store: ArtifactStore) -> tuple[ArtifactRef, ArtifactRef]:
    """The tokenizer and shards artifacts: built once, cache hits for every later caller."""
    corpus = plan.open_corpus()
    tokenizer = train_tokenizer(plan.tokenizer, corpus, store)
    shards = build_shards(plan.shards, corpus, tokenizer, store)
    return tokenizer, shards


def pretrain_as_rank(config: dict[str, Any], plan: PipelinePlan, paths: RunPaths) -> ArtifactRef:
    """This rank's part: rank zero tracks and publishes, the others only train."""
    settings = plan.pretrain
    store = ArtifactStore(paths.artifacts)
    tokenizer, shards = prepare(plan, store)
    if not is_rank_zero():
        return pretrain(settings, shards, tokenizer, store, start=plan.init)
    tracker = Tracker.for_run(plan.tracking, paths)

    def train_logged(run: RunHandle) -> ArtifactRef:
        run.log_params(redact_secrets(config))
        return pretrain(settings, shards, tokenizer, store, [run.lightning_logger()], plan.init)

    return tracker.record_stage("pretrain", train_logged, tags={"cloze.launch": "ranks"})


def main(argv: list[str]) -> int:
    prepare_only = "--prepare-only" in argv
    try:
        resolved = resolve_run([arg for arg in argv if arg != "--prepare-only"], "pretrain")
        config, run = resolved.config, resolved.run
        plan = PipelinePlan.from_run_config(run, init=resolved.init)
        if is_rank_zero() and plan.precision is not None:
            plan.precision.report(log)
        processes = run.trainer.world_size
        if processes > 1 and not prepare_only and not launched_per_rank():
            raise ConfigError(
                f"trainer.devices x trainer.num_nodes = {processes} processes, but this one was "
                "not started per rank: launch flows.orchestration.rank_entry with torchrun (see "
                "infra/multinode.md), or use `python -m flows` on one node"
            )
        paths = start_services(run)
        if prepare_only:
            tokenizer, shards = prepare(plan, ArtifactStore(paths.artifacts))
            print(f"tokenizer {tokenizer.path}\nshards {shards.path}")
            return 0
        ref = pretrain_as_rank(config, plan, paths)
    except ConfigError as error:
        return fail(error)
    if is_rank_zero():
        print(f"pretrain {ref.path} ({'reused' if ref.cache_hit else 'trained'})")
    return 0


if __name__ == "__main__":
    setup_logging()
    sys.exit(main(sys.argv[1:]))
