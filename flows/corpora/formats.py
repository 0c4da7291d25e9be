"""Streaming document readers, one per file format; each yields documents, never whole files.

Line-based formats decode line by line, so one bad byte names its line and a policy
(`corpus.decode_errors`) decides whether it fails the run, is replaced, or drops the line.
"""

from __future__ import annotations

import bz2
import csv
import errno
import gzip
import io
import json
import logging
import os
import stat
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from flows.corpora.stats import CorpusStats

log = logging.getLogger(__name__)
COMPRESSIONS = (".gz", ".bz2", ".zst")
FORMAT_BY_SUFFIX = {
    ".txt": "txt",
    ".text": "txt",
    ".md": "txt",
    ".raw": "txt",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
}
FORMATS = ("auto", "txt", "jsonl", "csv", "tsv", "parquet", "wikiextractor", "pubtator")
Lines = Iterator[tuple[int, str]]


UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


class CorpusInputError(ValueError):
    """An input file or path cannot be read as text; the message names it and the fix."""


def not_a_file(path: Path) -> str:
    """What `path` is, when it is not a regular file: for a message that says so, instead of
    calling a FIFO or a device "missing". Readers read a file more than once (to fingerprint it,
    then to parse it), which a pipe or a device cannot give."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            return f"is a link to {os.readlink(path)}, which does not exist"
        return "does not exist"
    except OSError as error:
        return f"cannot be read ({type(error).__name__}: {error})"
    kinds = {
        stat.S_ISFIFO: "a FIFO (a named pipe)",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
        stat.S_ISDIR: "a directory",
    }
    kind = next((name for test, name in kinds.items() if test(mode)), "not a regular file")
    return (
        f"is {kind}, not a regular file: Cloze reads each input more than once (to fingerprint "
        "it, then to parse it), which only a file allows; save its content to a file and name "
        "that"
    )


def unreadable_hint(path: Path, error: BaseException) -> str:
    """What went wrong reading `path` and the likely cause; the compression hint only where it
    can apply. Any OS error reading an input is reported this way, once: the same file fails
    the same way on a retry, and a rerun resumes."""
    found = f"{path} cannot be read ({type(error).__name__}: {error})"
    if isinstance(error, FileNotFoundError):
        return f"{found}; it was deleted or moved while the run read it: restore it and rerun"
    if isinstance(error, OSError) and error.errno == errno.EIO:
        return (
            f"{found}; the disk or network filesystem under it reported an I/O error: check "
            "the device (dmesg) or copy the file elsewhere, then rerun"
        )
    if path.suffix.lower() in COMPRESSIONS:
        return (
            f"{found}; if it is compressed, it may be truncated or not really the format its "
            "suffix says"
        )
    return found


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turns an OS error while `path` is read (a vanished file, EIO, a permission) into the
    CorpusInputError that names it: one `error:` line, exit 2, never retried."""
    try:
        yield
    except OSError as error:
        raise CorpusInputError(unreadable_hint(path, error)) from error


def logical_suffix(path: Path) -> str:
    """`notes.txt.gz` -> `.txt`: the format behind an optional compression suffix."""
    suffixes = [suffix.lower() for suffix in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def open_binary(path: Path) -> io.BufferedIOBase:
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix == ".bz2":
        return bz2.open(path, "rb")
    if suffix == ".zst":
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(path.open("rb")))
    return path.open("rb")


def detect_format(path: Path) -> str:
    """By suffix; files without one are sniffed (WikiExtractor output is named `wiki_00`)."""
    known = FORMAT_BY_SUFFIX.get(logical_suffix(path))
    if known:
        return known
    with open_binary(path) as handle:
        return "wikiextractor" if handle.read(5) == b"<doc " else "txt"


@dataclass(frozen=True)
class ReadRules:
    """How a reader treats bad bytes, bad CSV/TSV rows and oversized text; `max_chars` bounds a
    reader's memory."""

    decode_errors: str = "fail"
    max_chars: int = 1_000_000
    on_bad_rows: str = "fail"  # "skip": a bad CSV/TSV row is counted and dropped, not an error

    @property
    def max_line_bytes(self) -> int:
        return 4 * self.max_chars + 1  # UTF-8 needs at most 4 bytes per character


def decoded_lines(path: Path, rules: ReadRules, stats: CorpusStats) -> Lines:
    """Lines of a file, decoded one at a time; a line over the size bound is skipped in pieces.

    The skipped line still yields an empty line, so it ends the paragraph it interrupts instead
    of gluing its neighbours into one document.
    """
    limit = rules.max_line_bytes
    if starts_with_utf16_bom(path):
        yield from utf16_lines(path, rules, stats)
        return
    with open_binary(path) as handle:
        number = 0
        while raw := handle.readline(limit):
            number += 1
            if len(raw) == limit and not raw.endswith(b"\n"):
                while (rest := handle.readline(limit)) and not rest.endswith(b"\n"):
                    pass
                stats.dropped_long += 1
                log.warning(
                    "%s:%d is a line over %d characters: dropped (corpus.max_chars)",
                    path,
                    number,
                    rules.max_chars,
                )
                yield number, "\n"
                continue
            if number == 1 and raw.startswith(UTF8_BOM):
                raw = raw[len(UTF8_BOM) :]
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                if rules.decode_errors == "replace":
                    stats.undecodable_lines_replaced += 1
                    yield number, raw.decode("utf-8", errors="replace")
                elif rules.decode_errors == "skip":
                    stats.undecodable_lines_skipped += 1
                    log.warning("skipping undecodable line %d of %s", number, path)
                else:
                    raise CorpusInputError(
                        f"{path}:{number} is not valid UTF-8 ({error.reason} at byte "
                        f"{error.start}); fix the file or set corpus.decode_errors=replace|skip"
                    ) from error


def starts_with_utf16_bom(path: Path) -> bool:
    with open_binary(path) as handle:
        return handle.read(2) in UTF16_BOMS


def utf16_lines(path: Path, rules: ReadRules, stats: CorpusStats) -> Lines:
    """A UTF-16 file (it starts with a byte-order mark): decoded as such, not taken for binary."""
    text = io.TextIOWrapper(cast(IO[bytes], open_binary(path)), encoding="utf-16", newline=None)
    number = 0
    try:
        for number, line in enumerate(text, start=1):
            if len(line) > rules.max_chars:
                stats.dropped_long += 1
                log.warning(
                    "%s:%d is a line over %d characters: dropped", path, number, rules.max_chars
                )
                yield number, "\n"
            else:
                yield number, line
    except UnicodeDecodeError as error:
        raise CorpusInputError(
            f"{path}:{number + 1} is not valid UTF-16 ({error.reason}), although the file starts "
            "with a UTF-16 byte-order mark; re-encode it as UTF-8"
        ) from error
    finally:
        text.close()


class BoundedText:
    """Collects the lines of one document; past `max_chars` it keeps nothing and counts a drop."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.lines: list[str] = []
        self.size = 0
        self.overflowed = False

    def append(self, line: str) -> None:
        self.size += len(line)
        if self.size > self.max_chars:
            self.overflowed, self.lines = True, []
        elif not self.overflowed:
            self.lines.append(line)

    def finish(self, stats: CorpusStats) -> str:
        """The document, or "" when it was empty or too long; resets for the next document."""
        text = "" if self.overflowed else "".join(self.lines)
        if self.overflowed:
            stats.dropped_long += 1
        self.lines, self.size, self.overflowed = [], 0, False
        return text


def paragraphs(lines: Lines, rules: ReadRules, stats: CorpusStats) -> Iterator[str]:
    """Blank-line separated paragraphs: the document unit of most plain-text dumps."""
    paragraph = BoundedText(rules.max_chars)
    for _, line in lines:
        if line.strip():
            paragraph.append(line)
        elif paragraph.size and (text := paragraph.finish(stats)):
            yield text
    if paragraph.size and (text := paragraph.finish(stats)):
        yield text


def json_line(path: Path, number: int, line: str) -> object:
    """One JSON-lines record; a line that does not parse names its file and line."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise CorpusInputError(f"{path}:{number} is not valid JSON: {error.msg}") from error


def jsonl_records(path: Path, lines: Lines, text_field: str) -> Iterator[str]:
    for number, line in lines:
        if not line.strip():
            continue
        record = json_line(path, number, line)
        if not isinstance(record, dict) or text_field not in record:
            raise CorpusInputError(
                f"{path}:{number} has no field {text_field!r}; set corpus.text_field "
                "to the field that holds the text"
            )
        yield str(record[text_field])


def wikiextractor_documents(
    path: Path, lines: Lines, rules: ReadRules, stats: CorpusStats
) -> Iterator[str]:
    """`<doc ...>` blocks; the repeated title line is dropped, title-only stubs yield nothing."""
    body = BoundedText(rules.max_chars)
    inside = title_pending = False
    for number, line in lines:
        if line.startswith("<doc "):
            inside, title_pending = True, True
        elif line.startswith("</doc>"):
            if not inside:
                raise CorpusInputError(f"{path}:{number}: </doc> without an opening <doc>")
            text = body.finish(stats)
            if text.strip():
                yield text
            inside = False
        elif inside:
            if title_pending and line.strip():
                title_pending = False  # WikiExtractor repeats the title as the first line
            else:
                body.append(line)


def pubtator_documents(
    path: Path, lines: Lines, rules: ReadRules, stats: CorpusStats
) -> Iterator[str]:
    """PubTator (BC5CDR, NCBI disease corpus): title and abstract of each PMID, one document.

    A document is `PMID|t|title`, `PMID|a|abstract`, then annotation lines (`PMID<TAB>...`),
    ending at a blank line. Annotations are dropped: pretraining wants the text, not the labels.
    A line of another shape, or of another PMID, means the file is not what the format says.
    """
    body = BoundedText(rules.max_chars)
    pmid: str | None = None
    for number, line in lines:
        if not line.strip():
            if pmid is not None and (text := body.finish(stats)).strip():
                yield text
            pmid = None
            continue
        head, bar, rest = line.partition("|")
        if bar and head.isdigit() and rest[:2] in ("t|", "a|") and pmid in (None, head):
            pmid = head
            body.append(rest[2:].strip() + "\n")
        elif pmid is None or not line.startswith(pmid + "\t"):
            raise CorpusInputError(
                f"{path}:{number} is not a PubTator line (PMID|t|title, PMID|a|abstract or "
                f"PMID<TAB>annotation of the document above): {line[:60]!r}; check "
                "corpus.format=pubtator suits this file, or fix the line"
            )
    if pmid is not None and (text := body.finish(stats)).strip():
        yield text


def csv_rows(
    path: Path, lines: Lines, text_field: str, rules: ReadRules, stats: CorpusStats
) -> Iterator[str]:
    """One document per row of a CSV file with a header, parsed strictly: an unclosed quote or a
    row with another field count than the header is a bad row (an error naming its line, or
    with `corpus.on_bad_rows=skip` counted and dropped), never text that swallows the rows
    after it."""
    records = csv_records(path, lines, rules, stats)
    header = next(records, None)
    fields = header[1] if header else []
    if text_field not in fields:
        raise CorpusInputError(
            f"{path} has no column {text_field!r} (columns: {', '.join(fields)}); set "
            "corpus.text_field"
        )
    column = fields.index(text_field)
    for number, row in records:
        if len(row) != len(fields):
            bad_row(
                path,
                number,
                f"has {len(row)} comma-separated field(s), the header has {len(fields)}",
                rules,
                stats,
            )
        elif row[column]:
            yield row[column]


def tsv_rows(
    path: Path, lines: Lines, text_field: str, rules: ReadRules, stats: CorpusStats
) -> Iterator[str]:
    """One document per row of a tab-separated file with a header, split on tabs with no quoting
    (GLUE's convention: a quote character is text). A labelled task file read this way gives its
    text without its labels, for pretraining on a task's own domain (docs/guides/corpora.md).
    A row with another field count than the header is a bad row, as in `csv_rows`."""
    column, width = -1, 0
    for number, line in lines:
        fields = line.rstrip("\r\n").split("\t")
        if column < 0:
            if text_field not in fields:
                raise CorpusInputError(
                    f"{path}:{number} has no column {text_field!r} (columns: "
                    f"{', '.join(fields)}); set corpus.text_field"
                )
            column, width = fields.index(text_field), len(fields)
        elif not line.strip():
            continue
        elif len(fields) != width:
            problem = f"has {len(fields)} tab-separated field(s), the header has {width}"
            bad_row(path, number, problem, rules, stats)
        elif fields[column].strip():
            yield fields[column]


def bad_row(path: Path, number: int, problem: str, rules: ReadRules, stats: CorpusStats) -> None:
    """A CSV/TSV row that cannot be read as the header says: an error, or counted and dropped."""
    if rules.on_bad_rows != "skip":
        raise CorpusInputError(
            f"{path}:{number} {problem}: fix or remove the row, or set corpus.on_bad_rows=skip "
            "to count and drop such rows"
        )
    stats.bad_rows_skipped += 1
    log.warning("skipping %s:%d: it %s (corpus.on_bad_rows=skip)", path, number, problem)


def parquet_rows(path: Path, text_field: str) -> Iterator[str]:
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path)
    if text_field not in table.schema_arrow.names:
        raise CorpusInputError(
            f"{path} has no column {text_field!r} (columns: "
            f"{', '.join(table.schema_arrow.names)}); set corpus.text_field"
        )
    for batch in table.iter_batches(batch_size=1024, columns=[text_field]):
        yield from (text for text in batch.column(0).to_pylist() if text)


def read_documents(
    path: Path, file_format: str, text_field: str, rules: ReadRules, stats: CorpusStats
) -> Iterator[str]:
    if file_format == "parquet":
        yield from parquet_rows(path, text_field)
        return
    lines = decoded_lines(path, rules, stats)
    if file_format == "jsonl":
        yield from jsonl_records(path, lines, text_field)
    elif file_format == "csv":
        yield from csv_rows(path, lines, text_field, rules, stats)
    elif file_format == "tsv":
        yield from tsv_rows(path, lines, text_field, rules, stats)
    elif file_format == "wikiextractor":
        yield from wikiextractor_documents(path, lines, rules, stats)
    elif file_format == "pubtator":
        yield from pubtator_documents(path, lines, rules, stats)
    else:
        yield from paragraphs(lines, rules, stats)


# Whole records, for readers that need more than one field (labelled task files, issue 19): the
# same decoding and compression as the document readers above, so there is one reading layer.


def json_objects(path: Path, lines: Lines) -> Iterator[tuple[int, dict[str, object]]]:
    """`(line number, object)` per non-blank line; a line that is not a JSON object names itself."""
    for number, line in lines:
        if not line.strip():
            continue
        record = json_line(path, number, line)
        if not isinstance(record, dict):
            raise CorpusInputError(
                f"{path}:{number} is a JSON {type(record).__name__}, not an object; each line "
                "of a JSON-lines file holds one {...} record"
            )
        yield number, record


def csv_records(
    path: Path, lines: Lines, rules: ReadRules, stats: CorpusStats | None = None
) -> Iterator[tuple[int, list[str]]]:
    """RFC 4180 rows with the line each starts on; quoted fields may hold commas and newlines.

    `strict` makes an unclosed quote an error instead of a field that swallows the file's rest:
    the error names the line the record starts on. With `rules.on_bad_rows=skip` (and `stats`
    to count it) that record is dropped instead and parsing starts again on its next line, so
    one stray quote costs one row.
    """
    csv.field_size_limit(rules.max_line_bytes)
    source = iter(lines)
    replay: deque[tuple[int, str]] = deque()  # lines to read again after a dropped record
    record: list[tuple[int, str]] = []  # the lines of the record being parsed

    def feed() -> Iterator[str]:
        while True:
            item = replay.popleft() if replay else next(source, None)
            if item is None:
                return
            record.append(item)
            yield item[1]

    while True:
        reader = csv.reader(feed(), strict=True)  # reads no further than the record it yields
        try:
            for row in reader:
                start = record[0][0] if record else 0
                record.clear()
                if any(field.strip() for field in row):
                    yield start, row
            return
        except csv.Error as error:
            start = record[0][0]
            problem = f"starts a CSV record that cannot be parsed ({error})"
            if stats is None or rules.on_bad_rows != "skip":
                raise CorpusInputError(
                    f"{path}:{start}: the CSV record starting here cannot be parsed ({error}); an "
                    'unclosed or stray " is the usual cause: double quotes inside a quoted field '
                    '(""), or set corpus.on_bad_rows=skip to count and drop such rows; a field may '
                    f"hold at most corpus.max_chars={rules.max_chars} characters"
                ) from error
            bad_row(path, start, problem, rules, stats)
            replay.extendleft(reversed(record[1:]))
            record.clear()


def parquet_columns(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return list(pq.ParquetFile(path).schema_arrow.names)


def parquet_records(path: Path, columns: list[str]) -> Iterator[tuple[int, dict[str, object]]]:
    """`(row number, {column: value})` for the named columns; a missing one lists those present."""
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path)
    names = table.schema_arrow.names
    for column in columns:
        if column not in names:
            raise CorpusInputError(
                f"{path} has no column {column!r} (columns: {', '.join(names)}); name one of "
                "them in the settings that read this file"
            )
    number = 0
    for batch in table.iter_batches(batch_size=1024, columns=columns):
        for record in batch.to_pylist():
            number += 1
            yield number, record
