"""Local files: paths, globs and directories, in any format of `formats.py`, compressed or not."""

from __future__ import annotations

import glob
import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from flows.core.keys import opt_ins_at_default
from flows.corpora.formats import (
    COMPRESSIONS,
    FORMAT_BY_SUFFIX,
    UTF16_BOMS,
    CorpusInputError,
    ReadRules,
    detect_format,
    logical_suffix,
    not_a_file,
    open_binary,
    read_documents,
    reading,
    unreadable_hint,
)
from flows.corpora.hashing import content_hashes
from flows.corpora.stats import CorpusStats

log = logging.getLogger(__name__)
BINARY_SNIFF_BYTES = 8192
# Read rules the corpus key holds only when set off their default (flows/core/keys.py).
OPT_IN_RULES = ("on_bad_rows",)


def is_corpus_file(path: Path) -> bool:
    """What a directory contributes: known formats, and suffix-less WikiExtractor files."""
    if path.name.startswith("."):
        return False
    if logical_suffix(path) in FORMAT_BY_SUFFIX:
        return True
    with reading(path):
        return not path.suffix and detect_format(path) == "wikiextractor"


def resolve_paths(patterns: list[str], key: str = "corpus.paths") -> list[Path]:
    """Expands files, globs and directories into a sorted, de-duplicated list of files; an
    error names `key`, the setting that listed them."""
    files: set[Path] = set()
    for pattern in patterns:
        path = Path(pattern).expanduser()
        if glob.has_magic(pattern):
            matches = [Path(match) for match in glob.glob(str(path), recursive=True)]
            if not matches:
                raise CorpusInputError(f"{key}: the glob {pattern!r} matches no file")
            for match in matches:
                if match.is_file():
                    files.add(match)
                elif not match.is_dir():
                    raise CorpusInputError(f"{key}: {match} {not_a_file(match)}")
        elif path.is_dir():
            found = [
                child for child in path.rglob("*") if child.is_file() and is_corpus_file(child)
            ]
            if not found:
                raise CorpusInputError(
                    f"{key}: the directory {path} holds no "
                    f"{'/'.join(sorted(FORMAT_BY_SUFFIX))} file (optionally "
                    f"{'/'.join(COMPRESSIONS)}) and no WikiExtractor output"
                )
            files.update(found)
        elif path.is_file():
            files.add(path)
        else:
            raise CorpusInputError(f"{key}: {path} {not_a_file(path)}")
    return sorted(file.resolve() for file in files)


@dataclass(frozen=True)
class FileUnit:
    """One file: the unit of parallel work, small and picklable for process and Dask workers."""

    path: Path
    file_format: str
    text_field: str
    rules: ReadRules

    @property
    def name(self) -> str:
        return str(self.path)

    def texts(self, stats: CorpusStats) -> Iterator[str]:
        path = self.path
        try:
            file_format = detect_format(path) if self.file_format == "auto" else self.file_format
            if file_format != "parquet" and looks_binary(path):
                # A stray binary file in a text directory is common (images, archives); it is
                # skipped and counted, never decoded into garbage tokens.
                stats.binary_files_skipped += 1
                log.warning("skipping %s: it looks binary (it holds NUL bytes)", path)
                return
            yield from read_documents(path, file_format, self.text_field, self.rules, stats)
        except CorpusInputError:
            raise
        except (OSError, EOFError, ValueError, zstandard.ZstdError) as error:
            raise CorpusInputError(unreadable_hint(path, error)) from error


def looks_binary(path: Path) -> bool:
    """NUL bytes mean binary, except in UTF-16 text (which starts with a byte-order mark)."""
    with open_binary(path) as handle:
        head = handle.read(BINARY_SNIFF_BYTES)
    return head[:2] not in UTF16_BOMS and b"\0" in head


class FileSource:
    def __init__(
        self,
        paths: list[str],
        file_format: str,
        text_field: str,
        rules: ReadRules,
        key: str = "corpus.paths",
    ) -> None:
        self.files = resolve_paths(list(paths), key)
        self.file_format = file_format
        self.text_field = text_field
        self.rules = rules

    def fingerprint(self) -> dict[str, Any]:
        """What the files hold, in reading order, and how each is parsed; never their paths."""
        digest = hashlib.sha256()
        for path, content in zip(self.files, content_hashes(self.files), strict=True):
            digest.update(f"{self.format_of(path)}\0{content}\n".encode())
        keyed = {
            "kind": "files",
            "files": digest.hexdigest()[:20],
            "format": self.file_format,
            "text_field": self.text_field,
            "decode_errors": self.rules.decode_errors,
            "on_bad_rows": self.rules.on_bad_rows,
        }
        at_default = opt_ins_at_default(self.rules, OPT_IN_RULES)
        return {name: value for name, value in keyed.items() if name not in at_default}

    def format_of(self, path: Path) -> str:
        """The parser a file gets: the same bytes named .csv and .txt give other documents."""
        with reading(path):
            return detect_format(path) if self.file_format == "auto" else self.file_format

    def units(self) -> list[FileUnit]:
        return [
            FileUnit(path, self.file_format, self.text_field, self.rules) for path in self.files
        ]
