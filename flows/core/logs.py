"""The one logging setup of every entry point, and the loggers that are ours.

Third-party libraries stay at WARNING; our own progress lines (stage starts, cache hits, training
steps) at INFO, so a run's output says what it is doing without the libraries' chatter.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flows.core.redaction import redact_log_handlers

PROJECT_LOGGERS = ("flows", "lightning_modules", "cloze")
LOG_FORMAT = "%(asctime)s %(name)s: %(message)s"


_SAID: set[str] = set()  # this run's input warnings, as said


def new_run_warnings() -> None:
    """A run starts: its input warnings are said afresh (`resolve_run` calls this first, so a
    served worker's next run repeats what the last one said)."""
    _SAID.clear()


def warn_once(logger: logging.Logger, message: str, *args: object) -> None:
    """A warning about the run's input, said once per run: the up-front check of the task files
    and the stage both read them, and each would say it."""
    text = message % args if args else message
    if text not in _SAID:
        _SAID.add(text)
        logger.warning("%s", text)


def setup_logging(level: int = logging.INFO) -> None:
    """Call once per process (a spawned rank is a fresh process and calls it again)."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    redact_log_handlers()  # URI credentials never reach a log line
    show_progress(level)


def show_progress(level: int = logging.INFO) -> None:
    """Our loggers at `level`, Lightning's per-Trainer banners and tips off; no handler added.

    A deployment's flow run calls only this: Prefect has set up its logging, and one more
    handler would print every line twice.
    """
    for name in PROJECT_LOGGERS:
        logging.getLogger(name).setLevel(level)
    # Lightning's hardware banner and tips repeat for every Trainer; our own lines say more.
    logging.getLogger("pytorch_lightning.utilities.rank_zero").setLevel(logging.WARNING)
    logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*")
    # A fine-tuning epoch shorter than `trainer.log_every_steps`: Lightning counts the interval
    # in global steps across epochs, so nothing is lost, but it warns once per fit.
    warnings.filterwarnings("ignore", message=r".*smaller than the logging interval")


@contextmanager
def run_log_file(path: Path) -> Iterator[Path]:
    """Every line the console gets, and the tracebacks it is spared (an outage's, a user's
    error's), into `path` while the block runs: the place an `error:` line points to."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    redact_log_handlers()  # no secret in the file either
    try:
        yield path
    finally:
        root.removeHandler(handler)
        handler.close()


class SaidOnce(logging.Filter):
    """Drops a record whose exception repeats `message`, a refused run's one `error:` line.

    A deployment's run refused on a user's error ends Failed with that line as its state
    message; Prefect's engine then re-raises the failed state as it exits and logs it with a
    traceback ("Engine execution exited with unexpected exception"), in the run's logs too.
    """

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return error is None or str(error) != self.message
