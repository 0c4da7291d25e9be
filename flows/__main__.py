"""`python -m flows [--cfg] [hydra overrides...]`: compose the config and run the pipeline flow."""

from __future__ import annotations

import logging
import signal
import sys
import warnings

from flows.core.config import compose_config, expand_sweeps, to_yaml
from flows.core.paths import configure_services
from flows.core.settings import ConfigError
from flows.corpora.formats import CorpusInputError
from flows.tracking.retry import service_outage_message
from flows.tracking.runs import RedactingFilter, note_stop_signal

USAGE = """usage: python -m flows [--cfg] [-m] [OVERRIDE ...]

Runs the Cloze pretraining pipeline (tokenizer -> shards -> pretrain -> finetune).
OVERRIDEs are Hydra overrides, e.g. model=bert-mini trainer.max_steps=500 experiment=smoke.
  --cfg            print the composed config and exit
  -m, --multirun   sweep comma-separated values (experiment=bert,electra): one pipeline per
                   combination, then a comparison table
"""
FLAGS = ("--cfg", "-m", "--multirun")


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT: unwinds the run like Ctrl-C, so every `finally` and atexit hook runs.

    Python's default SIGTERM ends the process at once: no run is marked failed and Prefect's
    temporary server, stopped only by an atexit hook, is left listening.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_on_signals() -> None:
    """Turns the first SIGTERM or SIGINT into `Interrupted`; a second one acts as the default."""

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        note_stop_signal(signum)
        fail_fast_on_prefect_api()
        raise Interrupted(signum)

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)


def fail_fast_on_prefect_api() -> None:
    """Ctrl-C reaches the temporary Prefect server too, which exits at once; without this, every
    call that reports the run's final state retries the dead server (about 45 s in all)."""
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    temporary_settings(updates={PREFECT_CLIENT_MAX_RETRIES: 0}).__enter__()


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(USAGE)
        return 0
    multirun = bool({"-m", "--multirun"} & set(argv))
    overrides = [arg for arg in argv if arg not in FLAGS]
    try:
        runs = expand_sweeps(overrides) if multirun else [overrides]
        configs = [compose_config(run) for run in runs]  # every combination checked up front
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if "--cfg" in argv:
        print("\n---\n".join(to_yaml(config) for config in configs))
        return 0
    configure_services(configs[0])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter())  # URI credentials never reach a log line
    for name in ("flows", "lightning_modules", "cloze"):
        logging.getLogger(name).setLevel(logging.INFO)
    # Lightning's hardware banner and tips repeat for every Trainer; our own lines say more.
    logging.getLogger("pytorch_lightning.utilities.rank_zero").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*")

    from flows.pipeline import (
        pretraining_pipeline,
    )  # after configure_services: Prefect reads env on import

    summaries = []
    stop_on_signals()
    for config in configs:
        try:
            summaries.append(pretraining_pipeline(config))
        except Interrupted as stop:
            print(
                f"error: stopped by {stop}; the runs are marked KILLED. Rerun the same command to "
                "resume: finished stages are reused and pretraining resumes from its last "
                "checkpoint",
                file=sys.stderr,
            )
            return 128 + stop.signum
        except (ConfigError, CorpusInputError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except Exception as error:
            outage = service_outage_message(error)
            if outage is None:
                raise
            print(f"error: {outage}", file=sys.stderr)
            return 3
    if multirun:
        from flows.summary import render_comparison

        print(render_comparison(runs, summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
