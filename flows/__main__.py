"""`python -m flows [--cfg] [hydra overrides...]`: compose the config and run the pipeline flow."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Any

from flows.base_checkpoint import adopt_init
from flows.core.cli import SERVICE_ERROR, USAGE_ERROR, fail
from flows.core.config import compose_config, expand_sweeps, to_yaml
from flows.core.disk import disk_full_message
from flows.core.logs import setup_logging
from flows.core.redaction import redact_console, redact_log_handlers
from flows.core.settings import ConfigError, settings_from
from flows.corpora.formats import CorpusInputError
from flows.downstream.settings import FinetuneSettings
from flows.orchestration.interrupts import Interrupted, stop_on_signals, stopped_by_signal
from flows.plan import RunConfig, load_run_config, start_services
from flows.refresh.promotion import RefreshSettings
from flows.tracking.links import run_label
from flows.tracking.prefect_logs import quiet_expected_errors
from flows.tracking.retry import lost_prefect_api, service_outage_message
from flows.tracking.temporary_server import bind_temporary_server_to_this_run

USAGE = """usage: python -m flows [--cfg] [-m] [--verbose] [OVERRIDE ...]

Runs the Cloze pretraining pipeline (tokenizer -> shards -> pretrain -> finetune).
OVERRIDEs are Hydra overrides, e.g. model=bert-mini trainer.max_steps=500 experiment=smoke.
  --cfg            print the composed config and exit
  -m, --multirun   sweep comma-separated values (experiment=bert,electra): one pipeline per
                   combination, then a comparison table
  --verbose        print tracebacks of expected errors too (a bad config or input file); by
                   default such an error prints only its one `error:` line
"""
FLAGS = ("--cfg", "-m", "--multirun", "--verbose")
# A user's error, fixed by the input and named by the message: no traceback unless --verbose.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (ConfigError, CorpusInputError)


def validate(config: dict[str, Any]) -> RunConfig:
    """The whole config, `refresh.*` and the task files included, before any service or stage
    starts."""
    run = load_run_config(adopt_init(config)[0])  # the pipeline adopts again, and says so
    settings_from(RefreshSettings, run.refresh, "refresh")
    run.finetune.check_task_files(run.seed)  # task files read now: a bad one costs seconds
    return run


def task_recipes(config: dict[str, Any]) -> str:
    """`--cfg`'s last lines: the recipe each task runs on, as YAML comments (a task's catalog
    entry may set recipe fields over `finetune.*`); none for a config that does not validate."""
    try:
        settings = settings_from(FinetuneSettings, config.get("finetune", {}), "finetune")
    except ConfigError:
        return ""
    lines = [f"#   {spec.name}: {settings.recipe_text(spec)}" for spec in settings.specs()]
    return "\n".join(["# The recipe of each task in finetune.tasks:", *lines])


def adopted_text(config: dict[str, Any]) -> str:
    """`--cfg`'s output: the config that will run (a checkpoint's shape and recipe adopted), its
    notes as YAML comments first, the task recipes last."""
    adopted, notes = adopt_init(config)
    comments = "".join(f"# {note}\n" for note in notes)
    return comments + to_yaml(adopted) + task_recipes(adopted)


def environment_failure(error: Exception, root: Path) -> int | None:
    """A full disk or a lost server: prints what to do and gives the exit code; None for
    anything else (a bug keeps its traceback)."""
    full = disk_full_message(error, root)
    if full is not None:
        return fail(full, SERVICE_ERROR)
    outage = service_outage_message(error)
    if outage is None:
        return None
    code = fail(outage, SERVICE_ERROR)
    if lost_prefect_api(error):
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


def main(argv: list[str]) -> int:
    redact_console()  # before any handler keeps a reference to the streams
    if {"-h", "--help"} & set(argv):
        print(USAGE)
        return 0
    multirun = bool({"-m", "--multirun"} & set(argv))
    verbose = "--verbose" in argv
    overrides = [arg for arg in argv if arg not in FLAGS]
    try:
        runs = expand_sweeps(overrides) if multirun else [overrides]
        configs = [compose_config(run) for run in runs]
        if "--cfg" in argv:
            print("\n---\n".join(adopted_text(config) for config in configs))
            return 0
        validated = [validate(config) for config in configs]  # every combination, up front
    except EXPECTED_ERRORS as error:
        return fail_expected(error, verbose)
    try:
        paths = start_services(validated[0])
    except ConfigError as error:  # the run root cannot be written
        return fail(error)
    bind_temporary_server_to_this_run()
    setup_logging()
    return run_all(runs, configs, paths.root, verbose, multirun)


def run_all(
    runs: list[list[str]],
    configs: list[dict[str, Any]],
    root: Path,
    verbose: bool,
    multirun: bool,
) -> int:
    """Runs the pipeline once per config (several with --multirun); the exit code."""
    from flows.pipeline import pretraining_pipeline  # after start_services: Prefect reads env
    from lightning_modules.divergence import TrainingDiverged  # Lightning: after validation

    if not verbose:
        # A diverged run cannot go on as configured (exit 3): one line too, naming the setting.
        quiet_expected_errors((*EXPECTED_ERRORS, TrainingDiverged))
    redact_log_handlers()  # Prefect's own handlers, made when it was imported
    summaries = []
    stop_on_signals()
    for run_overrides, config in zip(runs, configs, strict=True):
        try:
            name = run_label(run_overrides, adopt_init(config)[0])  # a checkpoint's name
            summaries.append(pretraining_pipeline(config, name=name))
        except (Interrupted, SystemExit):
            # Lightning turns Ctrl-C (a KeyboardInterrupt) into `exit(1)` after its own cleanup.
            code = stopped_by_signal()
            if code is None:
                raise
            return code
        except EXPECTED_ERRORS as error:
            return fail_expected(error, verbose)
        except TrainingDiverged as error:
            return fail_expected(error, verbose, SERVICE_ERROR)
        except Exception as error:
            code = environment_failure(error, root)
            if code is None:
                raise
            return code
    if multirun:
        from flows.summary import render_comparison

        print(render_comparison(runs, summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
