"""`python -m flows [--cfg] [hydra overrides...]`: compose the config and run the pipeline flow."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flows.core.cli import SERVICE_ERROR, USAGE_ERROR, fail
from flows.core.config import expand_sweeps, to_yaml
from flows.core.disk import disk_full_message
from flows.core.logs import run_log_file, setup_logging
from flows.core.paths import RunPaths
from flows.core.redaction import redact_console, redact_log_handlers
from flows.core.settings import ConfigError
from flows.corpora.formats import CorpusInputError
from flows.orchestration.interrupts import Interrupted, stop_on_signals, stopped_by_signal
from flows.plan import STAGES, start_services
from flows.resolve import ResolvedRun, resolve_run
from flows.tracking.links import run_label
from flows.tracking.prefect_logs import quiet_expected_errors
from flows.tracking.retry import lost_prefect_api, service_outage_message
from flows.tracking.temporary_server import bind_temporary_server_to_this_run

DESCRIPTION = """Runs the Cloze pretraining pipeline (tokenizer -> shards -> pretrain -> finetune).
OVERRIDEs are Hydra overrides, e.g. model=bert-mini trainer.max_steps=500 experiment=smoke."""


def parse_args(argv: list[str], prog: str = "python -m flows") -> argparse.Namespace:
    """The run's flags; the rest are Hydra overrides (exit 2 on a bad flag, as on a bad key)."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="a Hydra override")
    parser.add_argument("--cfg", action="store_true", help="print the composed config and exit")
    parser.add_argument(
        "-m",
        "--multirun",
        action="store_true",
        help="sweep comma-separated values (experiment=bert,electra): one pipeline per "
        "combination, then a comparison table",
    )
    parser.add_argument(
        "--until",
        choices=STAGES,
        default=STAGES[-1],
        metavar="STAGE",
        help=f"stop after this stage, one of {', '.join(STAGES)}; the stages before it are "
        "computed or reused from the artifact store as in a whole run (default: finetune)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print tracebacks of expected errors too (a bad config or input file); by default "
        "such an error prints only its one `error:` line",
    )
    return parser.parse_intermixed_args(argv)


# A user's error, fixed by the input and named by the message: no traceback unless --verbose.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (ConfigError, CorpusInputError)


def resolve_runs(args: argparse.Namespace) -> list[ResolvedRun]:
    """Each run the command line asks for (several with --multirun), resolved once and all up
    front (flows/resolve.py): a bad key in the last fails before the first starts. `--cfg`
    runs no stage, so reads no task file."""
    runs = expand_sweeps(args.overrides) if args.multirun else [args.overrides]
    return [resolve_run(run, None if args.cfg else args.until) for run in runs]


def resolved_text(resolved: ResolvedRun) -> str:
    """`--cfg`'s output: the config that will run (a checkpoint's shape and recipe adopted), its
    notes as YAML comments first, the recipe each task runs on (a task's catalog entry may set
    recipe fields over `finetune.*`) as comments last."""
    comments = "".join(f"# {note}\n" for note in resolved.notes)
    lines = [f"#   {task.spec.name}: {task.text()}" for task in resolved.run.finetune.plan]
    recipes = "\n".join(["# The recipe of each task in finetune.tasks:", *lines])
    return comments + to_yaml(resolved.config) + recipes


def environment_message(error: BaseException, root: Path) -> str | None:
    """What to do about a full disk or a lost server; None for anything else."""
    return disk_full_message(error, root) or service_outage_message(error)


def environment_failure(error: Exception, root: Path, log_file: Path) -> int | None:
    """A full disk or a lost server: prints what to do, and where the traceback went, and gives
    the exit code; None for anything else (a bug keeps its traceback)."""
    message = environment_message(error, root)
    if message is None:
        return None
    code = fail(f"{message} (the traceback: {log_file})", SERVICE_ERROR)
    if disk_full_message(error, root) is None and lost_prefect_api(error):
        # At exit Prefect drains its queued log lines to the API, retrying the dead server for
        # minutes (measured: the run hung > 5 min after its error line). Nothing of ours is left
        # to flush, and no temporary server needs stopping: PREFECT_API_URL named an external
        # one, or the temporary one never answered and was killed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def fail_expected(error: BaseException, verbose: bool, code: int = USAGE_ERROR) -> int:
    """The one `error:` line of a user's error; with `--verbose`, its traceback first."""
    if verbose:
        traceback.print_exception(error)
    return fail(error, code)


def main(argv: list[str], prog: str = "python -m flows") -> int:
    redact_console()  # before any handler keeps a reference to the streams
    args = parse_args(argv, prog)
    try:
        resolved = resolve_runs(args)
    except EXPECTED_ERRORS as error:
        return fail_expected(error, args.verbose)
    if args.cfg:
        print("\n---\n".join(resolved_text(run) for run in resolved))
        return 0
    try:
        paths = start_services(resolved[0].run)
    except ConfigError as error:  # the run root cannot be written
        return fail(error)
    bind_temporary_server_to_this_run()
    setup_logging()
    return run_all(resolved, paths.root, args)


def run_all(
    resolved: list[ResolvedRun],
    root: Path,
    args: argparse.Namespace,
    runner: Callable[[ResolvedRun, str], Any] | None = None,
    label: Callable[[ResolvedRun], str] | None = None,
) -> int:
    """Runs the pipeline once per config (several with --multirun) through `--until`; the exit
    code. `runner` and `label` stand in for the pipeline and its run name (`cloze evaluate`)."""
    verbose = args.verbose
    from flows.pipeline import pretraining_pipeline  # after start_services: Prefect reads env
    from lightning_modules.divergence import TrainingDiverged  # Lightning: after validation

    if not verbose:
        # A diverged run cannot go on as configured (exit 3): one line too; so does an outage,
        # whose traceback goes to the run's log file only.
        quiet_expected_errors(
            (*EXPECTED_ERRORS, TrainingDiverged),
            lambda error: environment_message(error, root) is not None,
        )
    redact_log_handlers()  # Prefect's own handlers, made when it was imported
    summaries = []
    stop_on_signals()
    for run in resolved:
        # A checkpoint names the model.
        name = label(run) if label else run_label(run.run.overrides, run.config)
        log_file = RunPaths(root).logs / f"{name}.log"
        try:
            with run_log_file(log_file):
                summaries.append((runner or pretraining_pipeline)(run, name))
        except (Interrupted, SystemExit):
            # Lightning turns Ctrl-C (a KeyboardInterrupt) into `exit(1)` after its own cleanup.
            code = stopped_by_signal()
            if code is None:
                raise
            return code
        except Exception as error:
            # A signal to the whole process group also stops the temporary servers, so the
            # unwinding can fail on them: the signal, received first, decides the exit.
            if (code := stopped_by_signal()) is not None:
                return code
            if isinstance(error, EXPECTED_ERRORS):
                return fail_expected(error, verbose)
            if isinstance(error, TrainingDiverged):
                return fail_expected(error, verbose, SERVICE_ERROR)
            code = environment_failure(error, root, log_file)
            if code is None:
                raise
            return code
    if args.multirun and args.until == STAGES[-1]:  # the table compares what finetuning bought
        from flows.summary import render_comparison

        print(render_comparison([run.run.overrides for run in resolved], summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
