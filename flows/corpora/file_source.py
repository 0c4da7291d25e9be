"""Local text files: paths, globs and directories of .txt (blank-line paragraphs) or .jsonl."""

from __future__ import annotations

import glob
import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
TEXT_SUFFIXES = {
    ".txt": "txt",
    ".text": "txt",
    ".md": "txt",
    ".raw": "txt",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
}
BINARY_SNIFF_BYTES = 8192


class CorpusInputError(ValueError):
    """An input file or path cannot be read as text; the message names it and the fix."""


def resolve_paths(patterns: list[str]) -> list[Path]:
    """Expands files, globs and directories into a sorted, de-duplicated list of files."""
    files: set[Path] = set()
    for pattern in patterns:
        path = Path(pattern).expanduser()
        if glob.has_magic(pattern):
            matches = [Path(match) for match in glob.glob(str(path), recursive=True)]
            if not matches:
                raise CorpusInputError(f"corpus.paths: the glob {pattern!r} matches no file")
            files.update(match for match in matches if match.is_file())
        elif path.is_dir():
            found = [
                child
                for child in path.rglob("*")
                if child.is_file() and child.suffix.lower() in TEXT_SUFFIXES
            ]
            if not found:
                raise CorpusInputError(
                    f"corpus.paths: the directory {path} holds no "
                    f"{'/'.join(sorted(TEXT_SUFFIXES))} file"
                )
            files.update(found)
        elif path.is_file():
            files.add(path)
        else:
            raise CorpusInputError(f"corpus.paths: {path} does not exist")
    return sorted(file.resolve() for file in files)


class FileSource:
    def __init__(
        self, paths: list[str], file_format: str, text_field: str, decode_errors: str
    ) -> None:
        self.files = resolve_paths(list(paths))
        self.file_format = file_format
        self.text_field = text_field
        self.decode_errors = decode_errors

    def fingerprint(self) -> dict[str, Any]:
        digest = hashlib.sha256()
        for path in self.files:
            stat = path.stat()
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        return {
            "kind": "files",
            "files": digest.hexdigest()[:20],
            "format": self.file_format,
            "text_field": self.text_field,
            "decode_errors": self.decode_errors,
        }

    def texts(self) -> Iterator[str]:
        for path in self.files:
            if self._is_binary(path):
                if self.decode_errors == "fail":
                    raise CorpusInputError(
                        f"{path} looks binary (it holds NUL bytes); remove it "
                        "from corpus.paths or set corpus.decode_errors=skip"
                    )
                log.warning("skipping binary file %s", path)
                continue
            file_format = self.file_format
            if file_format == "auto":
                file_format = TEXT_SUFFIXES.get(path.suffix.lower(), "txt")
            lines = self._lines(path)
            yield from (self._jsonl(path, lines) if file_format == "jsonl" else _paragraphs(lines))

    @staticmethod
    def _is_binary(path: Path) -> bool:
        with path.open("rb") as handle:
            return b"\0" in handle.read(BINARY_SNIFF_BYTES)

    def _lines(self, path: Path) -> Iterator[tuple[int, str]]:
        errors = "replace" if self.decode_errors == "replace" else "strict"
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    yield number, raw.decode("utf-8", errors=errors)
                except UnicodeDecodeError as error:
                    if self.decode_errors == "skip":
                        log.warning("skipping undecodable line %d of %s", number, path)
                        continue
                    raise CorpusInputError(
                        f"{path}:{number} is not valid UTF-8 ({error.reason} at byte "
                        f"{error.start}); fix the file or set corpus.decode_errors=replace|skip"
                    ) from error

    def _jsonl(self, path: Path, lines: Iterator[tuple[int, str]]) -> Iterator[str]:
        for number, line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise CorpusInputError(f"{path}:{number} is not valid JSON: {error.msg}") from error
            if not isinstance(record, dict) or self.text_field not in record:
                raise CorpusInputError(
                    f"{path}:{number} has no field {self.text_field!r}; set corpus.text_field "
                    "to the field that holds the text"
                )
            yield str(record[self.text_field])


def _paragraphs(lines: Iterator[tuple[int, str]]) -> Iterator[str]:
    """Blank-line separated paragraphs: the document unit of most plain-text dumps."""
    paragraph: list[str] = []
    for _, line in lines:
        if line.strip():
            paragraph.append(line)
        elif paragraph:
            yield "".join(paragraph)
            paragraph = []
    if paragraph:
        yield "".join(paragraph)
