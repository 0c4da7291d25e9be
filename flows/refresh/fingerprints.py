"""Which files of a growing corpus are new or changed since the last successful refresh.

A manifest maps each file to its size and content hash. Content, not mtime, decides "changed":
a file rewritten with the same bytes, or touched, must not trigger retraining. Size, mtime,
ctime and inode let an unchanged file skip rehashing. The manifest is replaced atomically, and
only after a run succeeds, so a failed run leaves the next one to see the same new files again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.core.artifacts import file_sha256, replace_json

MANIFEST_VERSION = 1


@dataclass(frozen=True)
class FileFingerprint:
    size: int
    mtime_ns: int
    sha256: str
    # mtime can be set back (`touch -d`, `cp -p`); ctime and the inode cannot, so an in-place
    # edit that kept size and mtime is still rehashed. 0 in manifests written before them.
    ctime_ns: int = 0
    inode: int = 0

    @classmethod
    def of(cls, path: Path, sha256: str | None = None) -> FileFingerprint:
        stat = path.stat()
        digest = sha256 or file_sha256(path)
        return cls(stat.st_size, stat.st_mtime_ns, digest, stat.st_ctime_ns, stat.st_ino)

    def same_file(self, other: FileFingerprint) -> bool:
        """Same size, mtime, ctime and inode: the bytes need not be read again."""
        return (self.size, self.mtime_ns, self.ctime_ns, self.inode) == (
            other.size,
            other.mtime_ns,
            other.ctime_ns,
            other.inode,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "sha256": self.sha256,
            "ctime_ns": self.ctime_ns,
            "inode": self.inode,
        }


Manifest = dict[str, FileFingerprint]


@dataclass(frozen=True)
class CorpusChanges:
    """The corpus now (`current`) against the last manifest, file by file (absolute paths)."""

    new: list[str]
    changed: list[str]
    unchanged: list[str]
    removed: list[str]
    current: Manifest

    @property
    def to_train(self) -> list[str]:
        """New and changed files, in path order (the order the shards stage reads them)."""
        return sorted(self.new + self.changed)

    def describe(self) -> str:
        return (
            f"{len(self.new)} new, {len(self.changed)} changed, {len(self.unchanged)} unchanged, "
            f"{len(self.removed)} removed"
        )


def fingerprint_files(files: list[Path], previous: Manifest) -> Manifest:
    """Fingerprints of `files`; a file whose identity matches `previous` is not rehashed."""
    current: Manifest = {}
    for path in files:
        known = previous.get(str(path))
        now = FileFingerprint.of(path, sha256="unread")
        reuse = known is not None and known.same_file(now)
        current[str(path)] = known if reuse and known is not None else FileFingerprint.of(path)
    return current


def compare(previous: Manifest, current: Manifest) -> CorpusChanges:
    new, changed, unchanged = [], [], []
    for path, fingerprint in sorted(current.items()):
        known = previous.get(path)
        if known is None:
            new.append(path)
        elif known.sha256 != fingerprint.sha256:
            changed.append(path)
        else:
            unchanged.append(path)
    removed = sorted(set(previous) - set(current))
    return CorpusChanges(new, changed, unchanged, removed, current)


def load_manifest(path: Path) -> Manifest:
    """The last successful run's fingerprints; none before the first one."""
    if not path.is_file():
        return {}
    recorded = json.loads(path.read_text())
    if recorded.get("version") != MANIFEST_VERSION:
        raise ValueError(
            f"{path} has manifest version {recorded.get('version')}, expected {MANIFEST_VERSION}; "
            "delete it to treat every file as new"
        )
    return {name: FileFingerprint(**entry) for name, entry in recorded["files"].items()}


def save_manifest(path: Path, manifest: Manifest) -> None:
    """Atomic replace: a reader (or a crash) sees the old manifest or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "version": MANIFEST_VERSION,
        "files": {name: entry.to_json() for name, entry in sorted(manifest.items())},
    }
    replace_json(path, payload)
