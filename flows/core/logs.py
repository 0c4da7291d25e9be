"""The one logging setup of every entry point, and the loggers that are ours.

Third-party libraries stay at WARNING; our own progress lines (stage starts, cache hits, training
steps) at INFO, so a run's output says what it is doing without the libraries' chatter.
"""

from __future__ import annotations

import logging
import warnings

from flows.core.redaction import redact_log_handlers

# Where Prefect reports a task or flow run that raised (with the traceback), then its final state.
RUN_LOGGERS = ("prefect.task_runs", "prefect.flow_runs")

PROJECT_LOGGERS = ("flows", "lightning_modules", "cloze")
LOG_FORMAT = "%(asctime)s %(name)s: %(message)s"


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


class QuietExpectedErrors(logging.Filter):
    """Drops Prefect's report of a run that failed on an expected user error (a bad config or
    input file): the traceback, and the later lines that repeat the message ("Finished in state
    Failed(...)"). The CLI prints that error as its one `error:` line; a traceback would bury it.
    Any other error, a real bug, keeps its traceback (as the CLI catches only the expected
    types, a wrapped one is not expected either). Installed on the console handlers only, so
    the Prefect API (and its UI) still receives every line."""

    def __init__(self, expected: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.expected = expected
        self.messages: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(RUN_LOGGERS):
            return True
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            if not isinstance(error, self.expected):
                return True
            self.messages.add(str(error))
            return False
        text = record.getMessage()
        return not any(message and message in text for message in self.messages)


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


def quiet_expected_errors(expected: tuple[type[BaseException], ...]) -> QuietExpectedErrors:
    """Installs `QuietExpectedErrors` on the root logger's console handlers (Prefect's among
    them); call after Prefect has set up its logging."""
    from prefect.logging.handlers import APILogHandler

    quiet = QuietExpectedErrors(expected)
    for handler in logging.getLogger().handlers:
        if not isinstance(handler, APILogHandler):
            handler.addFilter(quiet)
    return quiet
