"""The fingerprint manifest of a growing corpus: new, changed, unchanged and removed files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flows.refresh.fingerprints import compare, fingerprint_files, load_manifest, save_manifest


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_new_changed_unchanged_and_removed_files_are_told_apart(tmp_path: Path) -> None:
    kept = write(tmp_path / "kept.txt", "kept text")
    edited = write(tmp_path / "edited.txt", "first version")
    gone = write(tmp_path / "gone.txt", "soon removed")
    manifest = tmp_path / "state" / "fingerprints.json"
    first = compare(load_manifest(manifest), fingerprint_files([edited, gone, kept], {}))
    assert first.new == sorted(str(p) for p in (edited, gone, kept))
    save_manifest(manifest, first.current)

    write(edited, "second version, longer")
    gone.unlink()
    added = write(tmp_path / "added.txt", "brand new")
    previous = load_manifest(manifest)
    changes = compare(previous, fingerprint_files([added, edited, kept], previous))
    assert changes.new == [str(added)]
    assert changes.changed == [str(edited)]
    assert changes.unchanged == [str(kept)]
    assert changes.removed == [str(gone)]
    assert changes.to_train == sorted([str(added), str(edited)])
    assert changes.describe() == "1 new, 1 changed, 1 unchanged, 1 removed"


def test_a_touched_file_with_the_same_text_is_unchanged(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "same text")
    previous = fingerprint_files([path], {})
    os.utime(path, ns=(1, 1))  # new mtime, same bytes: rehashed, found equal
    assert compare(previous, fingerprint_files([path], previous)).unchanged == [str(path)]


def test_the_manifest_round_trips_and_rejects_another_version(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "text")
    manifest = tmp_path / "m.json"
    current = fingerprint_files([path], {})
    save_manifest(manifest, current)
    assert load_manifest(manifest) == current
    assert not list(tmp_path.glob(".m.json.*"))  # the temp file was renamed into place
    manifest.write_text('{"version": 99, "files": {}}')
    with pytest.raises(ValueError, match="delete it to treat every file as new"):
        load_manifest(manifest)
