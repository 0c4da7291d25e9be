"""Input faults get the right diagnosis, and deterministic ones are never retried."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from prefect import flow, task

from flows.core.artifacts import ArtifactError
from flows.core.settings import ConfigError
from flows.corpora import CorpusSettings, open_corpus
from flows.corpora.formats import CorpusInputError
from flows.corpora.stats import CorpusStats
from flows.downstream.spec import TaskInputError
from flows.pipeline import IO_TASK_OPTIONS, can_heal

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
