"""Input faults get the right diagnosis, and deterministic ones are never retried."""

from __future__ import annotations

import errno
import io
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from prefect import flow, task

from flows.core.artifacts import ArtifactError, ArtifactStore
from flows.core.settings import ConfigError
from flows.corpora import CorpusSettings, formats, hashing, open_corpus
from flows.corpora.formats import CorpusInputError
from flows.corpora.stats import CorpusStats
from flows.downstream.tasks.spec import TaskInputError
from flows.orchestration.retry_policy import IO_TASK_OPTIONS, can_heal
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, train_tokenizer

TEXT = "a paragraph with comfortably more than five words in it, numbered {}"


def documents(paths: list[str]) -> list[str]:
    corpus = open_corpus(CorpusSettings(kind="files", paths=paths))
    return [text for unit in corpus.units() for text in unit.texts(CorpusStats())]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-8-sig"])
def test_text_with_a_byte_order_mark_is_decoded_not_skipped_as_binary(
    tmp_path: Path, encoding: str
) -> None:
    text = "\n\n".join(TEXT.format(number) for number in range(3))
    path = tmp_path / "bom.txt"
    bom = b"\xfe\xff" if encoding == "utf-16-be" else b""
    path.write_bytes(bom + text.encode(encoding))
    (tmp_path / "plain.txt").write_text(text)
    assert documents([str(path)]) == documents([str(tmp_path / "plain.txt")])
    assert len(documents([str(path)])) == 3


def test_a_file_deleted_mid_run_is_named_without_the_compression_hint(tmp_path: Path) -> None:
    path = tmp_path / "gone.txt"
    path.write_text(TEXT.format(1))
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(path)]))
    path.unlink()
    with pytest.raises(CorpusInputError, match="deleted or moved while the run read it") as caught:
        [text for unit in corpus.units() for text in unit.texts(CorpusStats())]
    assert "compressed" not in str(caught.value)


@pytest.mark.parametrize(
    ("error", "heals"),
    [
        (CorpusInputError("bad file"), False),
        (TaskInputError("bad task file"), False),
        (ConfigError("bad key"), False),
        (ArtifactError("bad manifest"), False),
        (FileNotFoundError("gone"), False),
        (PermissionError("read-only"), False),
        (ValueError("a bug"), False),
        (TimeoutError("nfs stalled"), True),
        (OSError(errno.EIO, "I/O error"), True),
        (ConnectionResetError("hub dropped"), True),
    ],
)
def test_only_io_that_can_heal_is_retried(error: BaseException, heals: bool) -> None:
    assert can_heal(error) is heals


def test_an_input_error_wrapped_by_a_worker_pool_is_still_not_retried() -> None:
    try:
        try:
            raise CorpusInputError("bad file")
        except CorpusInputError as inner:
            raise OSError(errno.EIO, "worker failed") from inner
    except OSError as wrapped:
        assert not can_heal(wrapped)


def test_prefect_runs_a_deterministic_input_error_once_and_transient_io_again() -> None:
    calls: list[str] = []

    @task(**{**IO_TASK_OPTIONS, "retry_delay_seconds": 0})
    def read(kind: str) -> None:
        calls.append(kind)
        if kind == "input" or len(calls) < 3:
            raise CorpusInputError("bad") if kind == "input" else TimeoutError("stalled")

    @flow
    def both() -> None:
        with pytest.raises(CorpusInputError):
            read("input")
        read("transient")

    both()
    assert calls == ["input", "transient", "transient"]


# --- The input-fault table: OS faults on corpus files, one row each. ---------------------------
# Each is one CorpusInputError naming the file (the CLI prints it as one `error:` line, exit 2)
# that Prefect does not retry: the same file fails the same way 30 s later.


def fifo(directory: Path) -> Path:
    path = directory / "pipe.txt"
    os.mkfifo(path)
    return path


def link(directory: Path, target: str) -> Path:
    path = directory / "linked.txt"
    path.symlink_to(target)
    return path


PATH_FAULTS = [
    ("a FIFO", fifo, r"corpus\.paths: .*pipe\.txt is a FIFO \(a named pipe\), not a regular "
     r"file: Cloze reads each input more than once"),
    ("a link to /dev/zero", lambda d: link(d, "/dev/zero"),
     r"corpus\.paths: .*linked\.txt is a character device, not a regular file"),
    ("a dangling link", lambda d: link(d, str(d / "gone.txt")),
     r"corpus\.paths: .*linked\.txt is a link to .*gone\.txt, which does not exist"),
    ("a glob matching a FIFO", lambda d: fifo(d).with_name("*.txt"),
     r"corpus\.paths: .*pipe\.txt is a FIFO"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "message"), PATH_FAULTS, ids=[f[0] for f in PATH_FAULTS])
def test_a_path_that_is_not_a_file_says_what_it_is(
    tmp_path: Path, name: str, make: Callable[[Path], Path], message: str
) -> None:
    with pytest.raises(CorpusInputError, match=message) as caught:
        open_corpus(CorpusSettings(kind="files", paths=[str(make(tmp_path))]))
    assert not can_heal(caught.value)


def eio(*args: object, **kwargs: object) -> NoReturn:
    """The injected fault: the disk under the file answers a read with EIO."""
    raise OSError(errno.EIO, "Input/output error")


class FailingRead(io.RawIOBase):
    """A file that yields a few bytes, then fails as a bad sector does."""

    def __init__(self) -> None:
        self.given = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.given:
            eio()
        self.given = True
        data = b"one paragraph of text\n"
        buffer[: len(data)] = data
        return len(data)


READ_FAULTS = [
    ("removed between stages", lambda path, _: path.unlink(),
     r"cannot be read \(FileNotFoundError: .*\); it was deleted or moved while the run read it"),
    ("EIO while fingerprinting", lambda _, patch: patch.setattr(hashing, "content_hash", eio),
     r"cannot be read \(OSError: \[Errno 5\] Input/output error\); the disk or network "
     r"filesystem under it reported an I/O error"),
    ("EIO while reading text",
     lambda _, patch: patch.setattr(formats, "open_binary",
                                    lambda path: io.BufferedReader(FailingRead())),
     r"cannot be read \(OSError: \[Errno 5\] Input/output error\); the disk"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fault", "message"), READ_FAULTS, ids=[f[0] for f in READ_FAULTS])
def test_an_os_error_reading_the_corpus_names_the_file_and_is_not_retried(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    fault: Callable[[Path, pytest.MonkeyPatch], object],
    message: str,
) -> None:
    """The tokenizer stage read the corpus; then the file fails before the shards stage does."""
    # A pipeline run earlier in this process leaves CLOZE_HASH_CACHE set (configure_services):
    # its on-disk hashes would spare the fingerprint the read this fault needs.
    monkeypatch.delenv(hashing.HASH_CACHE_ENV, raising=False)
    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join(TEXT.format(number) for number in range(200)))
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(path)]))
    store = ArtifactStore(tmp_path / "store")
    tokenizer = train_tokenizer(TokenizerSettings(vocab_size=100), corpus, store)
    hashing._MEMO.clear()  # as in a new process: the next stage's fingerprint reads the file
    fault(path, monkeypatch)
    with pytest.raises(CorpusInputError, match=rf"^{re.escape(str(path))} {message}") as caught:
        build_shards(ShardSettings(seq_len=16), corpus, tokenizer, store)
    assert not can_heal(caught.value)
