"""Every reader format, compressed or not, on files written by the test."""

from __future__ import annotations

import bz2
import csv
import gzip
import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from flows.corpora import CorpusSettings, open_corpus
from flows.corpora.formats import CorpusInputError
from flows.corpora.stats import CorpusStats

DOCS = [
    "First document has enough words to be kept by the cleaner.",
    "Second document also has plenty of words for the minimum.",
]


def read(*paths: Path, **settings: object) -> list[str]:
    corpus = CorpusSettings(kind="files", paths=[str(path) for path in paths], **settings)
    return list(open_corpus(corpus).documents())


def test_gzip_text_bzip2_jsonl_and_zstd_text_stream_like_plain_files(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "a.txt.gz", "wt") as handle:
        handle.write("\n\n".join(DOCS))
    with bz2.open(tmp_path / "b.jsonl.bz2", "wt") as handle:
        handle.write("\n".join(json.dumps({"text": doc}) for doc in DOCS))
    (tmp_path / "c.md.zst").write_bytes(
        zstandard.ZstdCompressor().compress("\n\n".join(DOCS).encode())
    )
    assert read(tmp_path / "a.txt.gz") == DOCS
    assert read(tmp_path / "c.md.zst") == DOCS
    assert read(tmp_path / "b.jsonl.bz2") == DOCS


def test_csv_and_parquet_read_the_configured_column(tmp_path: Path) -> None:
    with (tmp_path / "a.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "body"])
        writer.writerows([[1, DOCS[0]], [2, 'quoted, "with" commas and enough words here too']])
    pq.write_table(pa.table({"body": DOCS, "id": [1, 2]}), tmp_path / "b.parquet")
    assert read(tmp_path / "a.csv", text_field="body") == [
        DOCS[0],
        'quoted, "with" commas and enough words here too',
    ]
    assert read(tmp_path / "b.parquet", text_field="body") == DOCS
    with pytest.raises(CorpusInputError, match=r"b\.parquet has no column 'text'"):
        read(tmp_path / "b.parquet")
    with pytest.raises(
        CorpusInputError, match=r"a\.csv has no column 'text' \(columns: id, body\)"
    ):
        read(tmp_path / "a.csv")


def test_tsv_reads_the_named_column_split_on_tabs_with_quotes_as_text(tmp_path: Path) -> None:
    """A labelled GLUE file gives its sentences, not its labels: task-adaptive pretraining."""
    rows = [f"{DOCS[0]}\t1", '"a quoted" film , with enough words\t0', "", f"{DOCS[1]}\t0"]
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    assert read(tmp_path / "train.tsv", text_field="sentence") == [
        DOCS[0],
        '"a quoted" film , with enough words',
        DOCS[1],
    ]


def test_wikiextractor_blocks_drop_titles_and_stub_articles(tmp_path: Path) -> None:
    (tmp_path / "AA").mkdir()
    (tmp_path / "AA" / "wiki_00").write_text(
        '<doc id="1" url="?curid=1" title="Stub">\nStub\n\n</doc>\n'
        f'<doc id="2" url="?curid=2" title="Fox">\nFox\n\n{DOCS[0]}\nHistory.\n{DOCS[1]}\n</doc>\n'
    )
    (tmp_path / "AA" / "README").write_text("not a corpus file, skipped in directory mode")
    assert read(tmp_path) == [f"{DOCS[0]}\nHistory.\n{DOCS[1]}"]


def test_unknown_format_is_a_config_error() -> None:
    with pytest.raises(ValueError, match=r"corpus\.format='xml' must be one of"):
        CorpusSettings(kind="files", paths=["x"], format="xml")


def test_pubtator_gives_title_and_abstract_per_pmid_without_annotations(tmp_path: Path) -> None:
    (tmp_path / "a.PubTator.txt").write_text(
        f"11|t|A title line.\n11|a|{DOCS[0]}\n11\t0\t1\tA\tDisease\tD1\n11\tCID\tD1\tD2\n\n"
        f"22|t|Another title.\n22|a|{DOCS[1]}\n22\t3\t9\tother\tSpecificDisease\tD2\n"
    )
    assert read(tmp_path / "a.PubTator.txt", format="pubtator") == [
        f"A title line.\n{DOCS[0]}",
        f"Another title.\n{DOCS[1]}",
    ]


@pytest.mark.parametrize(
    "second",
    ["just prose in the middle", "33|a|an abstract of another PMID with no blank line first"],
)
def test_pubtator_malformed_line_names_file_and_line(tmp_path: Path, second: str) -> None:
    (tmp_path / "b.txt").write_text(f"11|t|Title.\n{second}\n11|a|{DOCS[0]}\n")
    with pytest.raises(
        CorpusInputError, match=r"b\.txt:2 is not a PubTator line .* corpus\.format"
    ):
        read(tmp_path / "b.txt", format="pubtator")


def unit_stats(path: Path, **settings: object) -> tuple[list[str], CorpusStats]:
    """The raw rows a file gives, and the counts of reading it."""
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(path)], **settings))
    stats = CorpusStats()
    return [text for unit in corpus.units() for text in unit.texts(stats)], stats


def test_bad_csv_rows_are_counted_and_dropped_with_on_bad_rows_skip(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One unclosed quote costs its row: the reader starts again on the next line."""
    rows = [f'{number},"row {number} has a few words"' for number in range(1, 401)]
    rows[10] = '11,"row 11 opens a quote it never closes'
    rows[20] = '21,"row 21 has one field too many",x'
    rows[30] = '31,"a quoted field that spans\nlines is one valid row"'
    (tmp_path / "rows.csv").write_text("id,text\n" + "\n".join(rows) + "\n")
    with caplog.at_level(logging.WARNING, logger="flows.corpora.formats"):
        texts, stats = unit_stats(tmp_path / "rows.csv", on_bad_rows="skip")
    assert len(texts) == 398 and stats.bad_rows_skipped == 2
    assert "row 10 has a few words" in texts and "row 12 has a few words" in texts
    assert "a quoted field that spans\nlines is one valid row" in texts
    assert "rows.csv:12: it starts a CSV record that cannot be parsed" in caplog.text
    assert "rows.csv:22: it has 3 comma-separated field(s), the header has 2" in caplog.text
    assert max(len(text) for text in texts) < 100  # nothing swallowed the rows after it


def test_a_quote_left_open_to_the_end_of_the_file_costs_only_its_row(tmp_path: Path) -> None:
    (tmp_path / "end.csv").write_text('text\n"first row"\n"second row\nthird row\n')
    texts, stats = unit_stats(tmp_path / "end.csv", on_bad_rows="skip")
    assert texts == ["first row", "third row"] and stats.bad_rows_skipped == 1


def test_bad_tsv_rows_are_counted_and_dropped_with_on_bad_rows_skip(tmp_path: Path) -> None:
    (tmp_path / "t.tsv").write_text("text\tlabel\nkept row\t1\nshort row\n\nextra\t1\t2\nlast\t0\n")
    texts, stats = unit_stats(tmp_path / "t.tsv", on_bad_rows="skip")
    assert texts == ["kept row", "last"] and stats.bad_rows_skipped == 2


def test_on_bad_rows_enters_the_corpus_key_only_when_set(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("text\nsome row\n")

    def fingerprint(**settings: object) -> dict:
        settings = {"kind": "files", "paths": [str(tmp_path / "a.csv")], **settings}
        return open_corpus(CorpusSettings(**settings)).fingerprint()

    assert fingerprint() == fingerprint(on_bad_rows="fail") != fingerprint(on_bad_rows="skip")
    assert "on_bad_rows" not in fingerprint()["source"]
