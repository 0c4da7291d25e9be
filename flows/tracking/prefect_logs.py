"""Our progress lines in Prefect's logs of the flow run they belong to."""

from __future__ import annotations

import logging
from collections.abc import Callable

from flows.core.logs import PROJECT_LOGGERS, show_progress
from flows.core.redaction import redact_console, redact_log_handlers

# Where Prefect reports a task or flow run that raised (with the traceback), then its final state.
RUN_LOGGERS = ("prefect.task_runs", "prefect.flow_runs")


def run_log_handler() -> logging.Handler:
    """Prefect's API log handler, silent for a line logged outside any flow or task run (a
    prefetch thread, code run between flows), where Prefect's own would warn for each."""
    from prefect.context import FlowRunContext, TaskRunContext
    from prefect.logging.handlers import APILogHandler

    class RunLogHandler(APILogHandler):
        def emit(self, record: logging.LogRecord) -> None:
            in_run = FlowRunContext.get() is not None or TaskRunContext.get() is not None
            if in_run or getattr(record, "flow_run_id", None):
                super().emit(record)

    return RunLogHandler()


def report_progress_to_prefect() -> None:
    """Every stage's progress lines (`cloze.training`, ...) in this flow run's Prefect logs.

    PREFECT_LOGGING_EXTRA_LOGGERS is not enough: Prefect reads its settings once, at its first
    import, which in the CLI comes before `configure_services` sets the variable (measured: the
    CLI's runs had no `cloze.*` records), and a worker's environment may lack it. In a
    deployment's flow run our loggers also sat at WARNING. So the level is set and Prefect's API
    handler attached here, once per logger. The console gets each line once, through the root
    handler (ours in the CLI, Prefect's in a served run).

    Every handler then masks URI credentials (Prefect's API handler writes to its database), and
    so does the console: a deployment's flow run is a process of its own, where the CLI's
    setup did not run.
    """
    from prefect.logging.handlers import APILogHandler

    show_progress()
    for name in PROJECT_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(handler, APILogHandler) for handler in logger.handlers):
            logger.addHandler(run_log_handler())
    redact_log_handlers()
    redact_console()


class QuietExpectedErrors(logging.Filter):
    """Drops Prefect's report of a run that failed on an expected user error (a bad config or
    input file): the traceback, and the later lines that repeat the message ("Finished in state
    Failed(...)"). The CLI prints that error as its one `error:` line; a traceback would bury it.
    Any other error, a real bug, keeps its traceback (as the CLI catches only the expected
    types, a wrapped one is not expected either). Installed on the console handlers only, so
    the Prefect API (and its UI) still receives every line."""

    def __init__(
        self,
        expected: tuple[type[BaseException], ...],
        also: Callable[[BaseException], bool] = lambda error: False,
    ) -> None:
        super().__init__()
        self.expected, self.also = expected, also
        self.messages: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(RUN_LOGGERS):
            return True
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            if not isinstance(error, self.expected) and not self.also(error):
                return True
            self.messages.add(str(error))
            return False
        text = record.getMessage()
        return not any(message and message in text for message in self.messages)


def quiet_expected_errors(
    expected: tuple[type[BaseException], ...],
    also: Callable[[BaseException], bool] = lambda error: False,
) -> QuietExpectedErrors:
    """Installs `QuietExpectedErrors` on the root logger's console handlers (Prefect's among
    them); call after Prefect has set up its logging. `also` quiets errors known by more than
    their type (a service outage, wrapped). A run's log file keeps every traceback."""
    from prefect.logging.handlers import APILogHandler

    quiet = QuietExpectedErrors(expected, also)
    for handler in logging.getLogger().handlers:
        if not isinstance(handler, APILogHandler | logging.FileHandler):
            handler.addFilter(quiet)
    return quiet
