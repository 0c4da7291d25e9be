"""The shared entry-point helpers: one table renderer, one error exit, one logging setup."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from flows.core.cli import SERVICE_ERROR, USAGE_ERROR, fail
from flows.core.logs import PROJECT_LOGGERS, setup_logging
from flows.core.tables import markdown_table, render_table


def test_markdown_table_has_a_header_rule_and_one_line_per_row() -> None:
    table = markdown_table(["run", "loss"], [("a", 1.5), ("b", 2)])
    assert table.splitlines() == ["| run | loss |", "|---|---|", "| a | 1.5 |", "| b | 2 |"]


def test_a_pipe_inside_a_cell_cannot_add_a_column() -> None:
    table = markdown_table(["override"], [("a|b",)])
    assert table.splitlines()[-1] == "| a\\|b |"


def test_a_row_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        markdown_table(["a", "b"], [("only one",)])


ROOT = Path(__file__).resolve().parents[4]
# A markdown header rule, or a row's opening `| ` written into a string: what a table built by
# hand looks like in source.
HAND_TABLE = re.compile(r"""---\||["']\| |\| ["']""")


def test_no_module_but_the_renderer_writes_a_table_row_by_hand() -> None:
    renderer = ROOT / "flows" / "core" / "tables.py"
    sources = [
        path
        for package in ("flows", "lightning_modules", "benchmarks")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != renderer
    ]
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sources
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if HAND_TABLE.search(line)
    ]
    assert sources and not offenders, f"build these tables with flows.core.tables: {offenders}"


def test_plain_tables_align_columns_for_a_terminal() -> None:
    table = render_table(["", "run1"], [("loss", "0.5"), ("accuracy", "0.91")], "plain")
    assert table.splitlines() == ["          run1", "loss      0.5", "accuracy  0.91"]


def test_fail_prints_the_error_and_returns_the_exit_code(capsys: pytest.CaptureFixture) -> None:
    assert fail("trainer.devices must be >= 1") == USAGE_ERROR
    assert fail(ConnectionError("no server"), SERVICE_ERROR) == SERVICE_ERROR
    assert capsys.readouterr().err.splitlines() == [
        "error: trainer.devices must be >= 1",
        "error: no server",
    ]


def test_setup_logging_sets_the_level_of_our_loggers_only() -> None:
    before = {name: logging.getLogger(name).level for name in (*PROJECT_LOGGERS, "mlflow")}
    try:
        setup_logging(logging.DEBUG)
        assert all(logging.getLogger(name).level == logging.DEBUG for name in PROJECT_LOGGERS)
        assert logging.getLogger("mlflow").level == before["mlflow"]
    finally:
        for name, level in before.items():
            logging.getLogger(name).setLevel(level)
