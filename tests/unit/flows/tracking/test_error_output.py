"""An expected user error prints one line; a real bug keeps its traceback.

Prefect logs a failed task or flow run with its traceback, then its final state. For a bad
config or input file the CLI's `error:` line says everything, so those records stay off the
console unless `--verbose`; a handler of our own on the root logger stands in for Prefect's
console handler, and the flow runs for real.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from prefect import flow, task

from flows.__main__ import EXPECTED_ERRORS, main
from flows.core.settings import ConfigError
from flows.tracking.prefect_logs import quiet_expected_errors


@task
def failing(error: BaseException) -> None:
    raise error


@flow
def run_once(error: BaseException) -> None:
    failing(error)


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """A console handler on the root logger, quieted as the CLI quiets Prefect's."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    quiet = quiet_expected_errors(EXPECTED_ERRORS)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        for other in root.handlers:
            other.removeFilter(quiet)


def test_a_run_failing_on_a_config_error_leaves_nothing_on_the_console(
    console: io.StringIO,
) -> None:
    with pytest.raises(ConfigError):
        run_once(ConfigError("finetune.seeds=0 must be at least 1"))
    assert "must be at least 1" not in console.getvalue()
    assert "Traceback" not in console.getvalue()


def test_a_run_failing_on_a_bug_keeps_its_traceback(console: io.StringIO) -> None:
    with pytest.raises(ZeroDivisionError):
        run_once(ZeroDivisionError("a real bug"))
    assert "Traceback" in console.getvalue() and "a real bug" in console.getvalue()


def test_verbose_prints_the_traceback_before_the_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--verbose", "finetune.seeds=0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback")
    assert err.endswith("error: finetune.seeds=0 must be at least 1\n")
    assert main(["finetune.seeds=0"]) == 2
    assert capsys.readouterr().err == "error: finetune.seeds=0 must be at least 1\n"
