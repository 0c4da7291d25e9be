"""Corpus keys follow file content, not location, and an unchanged file is read once."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from flows.corpora import CorpusSettings, hashing, open_corpus
from flows.refresh.fingerprints import compare, fingerprint_files

TEXT = "a word occurring here {} and more words after it"


def fingerprint(*paths: Path) -> dict:
    return open_corpus(CorpusSettings(kind="files", paths=[str(p) for p in paths])).fingerprint()


def edit_keeping_size_and_mtime(path: Path, old: str, new: str) -> None:
    """An in-place edit that a (size, mtime) check cannot see."""
    stat = path.stat()
    text = path.read_text()
    assert len(old) == len(new) and old in text
    path.write_text(text.replace(old, new))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    path = tmp_path / "a" / "corpus.txt"
    path.parent.mkdir()
    path.write_text("\n\n".join(TEXT.format(n) for n in range(20)))
    return path


def test_an_in_place_edit_with_the_same_size_and_mtime_changes_the_key(corpus_file: Path) -> None:
    before = fingerprint(corpus_file)
    edit_keeping_size_and_mtime(corpus_file, "occurring", "happening")
    assert fingerprint(corpus_file) != before


def test_the_same_bytes_at_another_path_give_the_same_key(
    corpus_file: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "elsewhere" / "renamed.txt"
    copy.parent.mkdir()
    shutil.copy2(corpus_file, copy)  # cp -p
    assert fingerprint(copy) == fingerprint(corpus_file)


def test_the_same_bytes_parsed_as_another_format_give_another_key(
    corpus_file: Path, tmp_path: Path
) -> None:
    as_csv = tmp_path / "corpus.csv"
    shutil.copy2(corpus_file, as_csv)
    assert fingerprint(as_csv) != fingerprint(corpus_file)


def test_an_unchanged_file_is_hashed_once_across_processes(
    corpus_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache" / "file-hashes.json"
    monkeypatch.setenv(hashing.HASH_CACHE_ENV, str(cache))
    first = fingerprint(corpus_file)
    assert cache.is_file()
    monkeypatch.setattr(hashing, "_MEMO", {})  # a new process: only the file cache is left

    def must_not_read(path: Path) -> str:
        raise AssertionError(f"{path} was read again")

    monkeypatch.setattr(hashing, "content_hash", must_not_read)
    assert fingerprint(corpus_file) == first


def test_refresh_sees_an_in_place_edit_that_kept_size_and_mtime(corpus_file: Path) -> None:
    previous = fingerprint_files([corpus_file], {})
    edit_keeping_size_and_mtime(corpus_file, "occurring", "happening")
    changes = compare(previous, fingerprint_files([corpus_file], previous))
    assert changes.changed == [str(corpus_file)]
