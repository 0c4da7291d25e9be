from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from flows.core.artifacts import (
    MANIFEST_FILE,
    ArtifactError,
    ArtifactStore,
    atomic_file,
    file_lock,
    replace_json,
    stage_key,
)


def test_key_ignores_dict_order_and_changes_with_settings_inputs_and_version() -> None:
    base = stage_key("shards", 1, {"a": 1, "b": 2}, {"tokenizer": "k"})
    assert base == stage_key("shards", 1, {"b": 2, "a": 1}, {"tokenizer": "k"})
    assert base != stage_key("shards", 1, {"a": 1, "b": 3}, {"tokenizer": "k"})
    assert base != stage_key("shards", 1, {"a": 1, "b": 2}, {"tokenizer": "other"})
    assert base != stage_key("shards", 2, {"a": 1, "b": 2}, {"tokenizer": "k"})


def build_counter(calls: list[Path]):
    def build(directory: Path) -> dict:
        calls.append(directory)
        (directory / "data.txt").write_text("payload")
        return {"rows": 3}

    return build


def test_second_request_is_a_cache_hit_that_does_no_work(tmp_path: Path) -> None:
    store, calls = ArtifactStore(tmp_path), []
    first = store.get_or_build("stage", "k1", build_counter(calls), {"settings": {}})
    second = store.get_or_build("stage", "k1", build_counter(calls), {"settings": {}})
    assert len(calls) == 1
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert second.outputs == {"rows": 3}
    assert (second.path / "data.txt").read_text() == "payload"
    assert (second.path / MANIFEST_FILE).is_file()


def test_a_failed_build_leaves_no_artifact_and_no_temp_dir(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)

    def failing(directory: Path) -> dict:
        (directory / "half.bin").write_bytes(b"x")
        raise RuntimeError("killed halfway")

    with pytest.raises(RuntimeError, match="killed halfway"):
        store.get_or_build("stage", "k1", failing, {})
    assert store.lookup("stage", "k1") is None
    assert [p.name for p in (tmp_path / "stage").iterdir()] == [".k1.lock"]


def test_temp_dirs_left_by_a_killed_run_are_cleared_on_rebuild(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    stale = tmp_path / "stage" / ".tmp-k1-deadbeef"
    stale.mkdir(parents=True)
    store.get_or_build("stage", "k1", build_counter([]), {})
    assert not stale.exists()


def test_a_killed_runs_temp_dir_is_cleared_when_another_run_published_the_key(
    tmp_path: Path,
) -> None:
    store = ArtifactStore(tmp_path)
    store.get_or_build("stage", "k1", build_counter([]), {})
    stale = tmp_path / "stage" / ".tmp-k1-deadbeef"
    stale.mkdir()
    assert store.get_or_build("stage", "k1", build_counter([]), {}).cache_hit
    assert not stale.exists()


def test_replace_json_leaves_the_old_file_when_the_write_fails(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    replace_json(target, {"val_loss": 1.0})
    with pytest.raises(TypeError):
        replace_json(target, {"val_loss": object()})  # fails mid-serialisation
    assert json.loads(target.read_text()) == {"val_loss": 1.0}


def test_an_artifact_failing_validation_is_quarantined_and_rebuilt(tmp_path: Path) -> None:
    store, calls = ArtifactStore(tmp_path), []
    store.get_or_build("stage", "k1", build_counter(calls), {})

    def reject(ref) -> None:
        raise ValueError("corrupt")

    rebuilt = store.get_or_build("stage", "k1", build_counter(calls), {}, validate=reject)
    assert len(calls) == 2 and not rebuilt.cache_hit
    assert len(list((tmp_path / "stage").glob(".corrupt-k1-*"))) == 1


def test_concurrent_requests_build_once(tmp_path: Path) -> None:
    store, calls, results = ArtifactStore(tmp_path), [], []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                store.get_or_build("stage", "k1", build_counter(calls), {})
            )
        )
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert sorted(ref.cache_hit for ref in results) == [False, True, True, True]


def test_a_folder_without_manifest_is_quarantined_and_rebuilt(tmp_path: Path) -> None:
    store, calls = ArtifactStore(tmp_path), []
    store.get_or_build("stage", "k1", build_counter(calls), {})
    (tmp_path / "stage" / "k1" / MANIFEST_FILE).unlink()
    rebuilt = store.get_or_build("stage", "k1", build_counter(calls), {})
    assert len(calls) == 2 and not rebuilt.cache_hit
    assert len(list((tmp_path / "stage").glob(".corrupt-k1-*"))) == 1


def test_a_truncated_manifest_is_named_and_the_artifact_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, calls = ArtifactStore(tmp_path), []
    store.get_or_build("stage", "k1", build_counter(calls), {})
    manifest = tmp_path / "stage" / "k1" / MANIFEST_FILE
    manifest.write_text(manifest.read_text()[:10])
    with pytest.raises(ArtifactError, match=f"{manifest}.*does not parse"):
        store.lookup("stage", "k1")
    assert not store.get_or_build("stage", "k1", build_counter(calls), {}).cache_hit
    assert str(manifest) in caplog.text


def test_a_file_changed_after_publish_fails_its_checksum_and_is_rebuilt(tmp_path: Path) -> None:
    store, calls = ArtifactStore(tmp_path), []
    store.get_or_build("stage", "k1", build_counter(calls), {})
    data = tmp_path / "stage" / "k1" / "data.txt"
    data.write_text("pbyload")  # same size, one byte flipped
    with pytest.raises(ArtifactError, match=f"{data} does not match the checksum"):
        store.lookup("stage", "k1")
    assert not store.get_or_build("stage", "k1", build_counter(calls), {}).cache_hit
    assert len(calls) == 2


@pytest.mark.parametrize("key", ["../outside", "..", "a/b", "/etc", ""])
def test_a_key_that_could_leave_the_store_is_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(ArtifactError, match="not a store name"):
        ArtifactStore(tmp_path).lookup("tokenizer", key)


def test_a_checksum_entry_pointing_outside_the_artifact_is_refused(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    store.get_or_build("stage", "k1", build_counter([]), {})
    manifest = tmp_path / "stage" / "k1" / MANIFEST_FILE
    recorded = json.loads(manifest.read_text())
    recorded["checksums"] = {"../../secret": "0" * 64}
    manifest.write_text(json.dumps(recorded))
    with pytest.raises(ArtifactError, match="resolves outside"):
        store.lookup("stage", "k1")


def test_the_atomic_writer_leaves_no_partial_file_behind(tmp_path: Path) -> None:
    target = tmp_path / "blob.bin"
    with pytest.raises(OSError), atomic_file(target) as handle:
        handle.write(b"half")
        raise OSError(28, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_a_held_lock_says_once_that_it_waits_then_takes_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "domain" / "refresh.lock"
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with file_lock(path):
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(30)
    calls: list[str] = []

    def waiting() -> None:
        calls.append("waiting")
        release.set()  # the other holder ends; this one then gets the lock

    with file_lock(path, waiting):
        holder.join(30)  # it held the lock until it was told to let go
        assert not holder.is_alive()
    with file_lock(path, waiting):  # free: no wait, nothing said
        pass
    assert calls == ["waiting"]
