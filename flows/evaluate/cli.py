"""`cloze evaluate [hydra overrides...]`: a checkpoint as it is, on the tasks, no pretraining.

The config is a run's (`conf/`, the same overrides), resolved once (flows/resolve.py); it must
name the checkpoint in `pretrain.init_from`. A bad key, a missing checkpoint or task file fails
with one `error:` line and exit 2 before any stage; the run itself goes through the pipeline's
runner (`flows.__main__.run_all`: logs, signals, outages), with the evaluate flow in its place.
"""

from __future__ import annotations

import argparse
from typing import Any

from flows.__main__ import EXPECTED_ERRORS, fail_expected, run_all
from flows.core.cli import fail
from flows.core.redaction import redact_console
from flows.core.settings import ConfigError
from flows.evaluate.checks import check_evaluable, evaluate_label
from flows.plan import start_services
from flows.resolve import ResolvedRun, resolve_run
from flows.tracking.temporary_server import bind_temporary_server_to_this_run

DESCRIPTION = """Scores a checkpoint as it is on the downstream tasks: its tokenizer and weights
are imported, then each task's base and random-init arms run with their grids, seeds, intervals
and baselines. No corpus, no shards, no pretraining; the arms are the cached ones a later
continuation of the same checkpoint reuses. OVERRIDEs are Hydra overrides and must set
pretrain.init_from, e.g. pretrain.init_from=/models/bert-base-uncased finetune=ncbi_disease."""


def parse_args(argv: list[str], prog: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="a Hydra override")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print tracebacks of expected errors too (a bad config or input file)",
    )
    return parser.parse_intermixed_args(argv)


def resolve(overrides: list[str]) -> ResolvedRun:
    """The run, resolved once as one that builds no shards and checked for what an evaluation
    needs (flow.check_evaluable), without importing Prefect."""
    resolved = resolve_run(overrides, pretraining=False)  # no shards: `shards.*` unchecked
    check_evaluable(resolved)
    return resolved


def evaluation(resolved: ResolvedRun, name: str) -> Any:
    """The runner `run_all` calls: the evaluate flow (Prefect is imported only now, after
    `start_services`)."""
    from flows.evaluate.flow import evaluate_flow
    from flows.pipeline import pretraining_pipeline

    return pretraining_pipeline(resolved, name, flow_object=evaluate_flow)


def main(argv: list[str], prog: str = "cloze evaluate") -> int:
    redact_console()  # before any handler keeps a reference to the streams
    args = parse_args(argv, prog)
    try:
        resolved = resolve(args.overrides)
    except EXPECTED_ERRORS as error:
        return fail_expected(error, args.verbose)
    try:
        paths = start_services(resolved.run)
    except ConfigError as error:  # the run root cannot be written
        return fail(error)
    bind_temporary_server_to_this_run()
    from flows.core.logs import setup_logging

    setup_logging()
    runner_args = argparse.Namespace(verbose=args.verbose, multirun=False, until="finetune")
    return run_all([resolved], paths.root, runner_args, evaluation, evaluate_label)
