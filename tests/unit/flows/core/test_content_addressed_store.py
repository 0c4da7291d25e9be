"""One input key, one artifact: publishing never replaces, and a content-addressed stage's key
is its files' hash, so downstream keys follow what was built, not what was asked for.

Two runs whose locks cannot see each other (two machines on one shared store) are simulated by
publishing the competitor's artifact from inside the build: the injected fault.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from flows.core.artifacts import ArtifactError, ArtifactStore, content_key, file_checksums


def writing(payload: str, then: Callable[[], None] = lambda: None):
    def build(directory: Path) -> dict:
        (directory / "vocab.txt").write_text(payload)
        then()
        return {"payload": payload}

    return build


def test_the_key_is_the_content_and_the_input_key_links_to_it(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    built = store.get_or_build("tok", "input1", writing("a b c"), {}, content_addressed=True)
    assert built.key == content_key("tok", file_checksums(built.path))
    assert built.path == tmp_path / "tok" / built.key
    assert os.readlink(tmp_path / "tok" / "input1") == built.key
    again = store.get_or_build("tok", "input1", writing("x y z"), {}, content_addressed=True)
    assert (again.key, again.path, again.cache_hit) == (built.key, built.path, True)
    assert store.lookup("tok", "input1") == store.lookup("tok", built.key) == again


def test_builds_with_different_content_get_different_keys(tmp_path: Path) -> None:
    first = ArtifactStore(tmp_path / "machine-a").get_or_build(
        "tok", "input1", writing("a b c"), {}, content_addressed=True
    )
    second = ArtifactStore(tmp_path / "machine-b").get_or_build(
        "tok", "input1", writing("a c b"), {}, content_addressed=True
    )
    same = ArtifactStore(tmp_path / "machine-c").get_or_build(
        "tok", "input1", writing("a b c"), {}, content_addressed=True
    )
    assert first.key != second.key and same.key == first.key


def test_a_racing_build_for_a_linked_input_key_adopts_the_first(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    elsewhere = ArtifactStore(tmp_path / "other-machine")

    def other_machine_finishes_first() -> None:
        theirs = elsewhere.get_or_build("tok", "in", writing("first"), {}, content_addressed=True)
        shutil.copytree(theirs.path, tmp_path / "tok" / theirs.key)
        os.symlink(theirs.key, tmp_path / "tok" / "in")

    ours = store.get_or_build(
        "tok", "in", writing("second", other_machine_finishes_first), {}, content_addressed=True
    )
    assert ours.outputs == {"payload": "first"}
    assert (ours.path / "vocab.txt").read_text() == "first"
    assert store.lookup("tok", "in") == ours


def test_a_racing_publish_under_the_same_key_adopts_the_first(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    elsewhere = ArtifactStore(tmp_path / "other-machine")

    def other_machine_finishes_first() -> None:
        theirs = elsewhere.get_or_build("shards", "k1", writing("first"), {})
        shutil.copytree(theirs.path, tmp_path / "shards" / "k1")

    ours = store.get_or_build("shards", "k1", writing("second", other_machine_finishes_first), {})
    assert ours.outputs == {"payload": "first"}
    assert (ours.path / "vocab.txt").read_text() == "first"
    assert not list((tmp_path / "shards").glob(".tmp-*"))


def test_damaged_content_is_quarantined_and_the_link_follows_the_rebuild(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    built = store.get_or_build("tok", "in", writing("a b c"), {}, content_addressed=True)
    (built.path / "vocab.txt").write_text("a b d")
    rebuilt = store.get_or_build("tok", "in", writing("a b e"), {}, content_addressed=True)
    assert not rebuilt.cache_hit and rebuilt.key != built.key
    assert os.readlink(tmp_path / "tok" / "in") == rebuilt.key
    assert list((tmp_path / "tok").glob(f".corrupt-{built.key}-*"))


def test_a_link_out_of_the_store_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    os.symlink("../../etc", tmp_path / "tok" / "in")
    with pytest.raises(ArtifactError, match=r"links to '\.\./\.\./etc'.*refused"):
        ArtifactStore(tmp_path).lookup("tok", "in")
