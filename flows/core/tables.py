"""The one table renderer: every report, summary and comparison prints its tables through here.

Markdown for files, MLflow and Prefect artifacts; aligned plain text for a terminal. A `|` inside
a cell is escaped, so a run name or override that contains one cannot shift the columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

TABLE_FORMATS = ("markdown", "plain")


def markdown_table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table; cells are rendered with `str`."""
    lines = [header, *rows]
    if any(len(line) != len(header) for line in lines):
        raise ValueError(f"every row needs {len(header)} cells: {lines}")
    rendered = ["| " + " | ".join(_cell(cell) for cell in line) + " |" for line in lines]
    return "\n".join([rendered[0], "|" + "---|" * len(header), *rendered[1:]])


def plain_table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """Columns padded to their widest cell, two spaces apart, for a terminal."""
    lines = [[str(cell) for cell in line] for line in [header, *rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def render_table(
    header: Sequence[object], rows: Iterable[Sequence[object]], table_format: str
) -> str:
    """`table_format` is one of TABLE_FORMATS (validated where the user chose it)."""
    return markdown_table(header, rows) if table_format == "markdown" else plain_table(header, rows)


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|")
