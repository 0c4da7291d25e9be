"""Content-addressed, atomically published stage outputs.

A stage's key hashes what determines its output (stage name and version, output-relevant settings,
the keys of its inputs), never paths, worker counts or devices. Outputs are built in a private temp
dir, `manifest.json` is written last, and the dir is renamed into place: a reader either sees a
complete artifact or none. A per-key file lock makes concurrent runs compute each stage once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_FILE = "manifest.json"
log = logging.getLogger(__name__)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def stage_key(
    stage: str, version: int, settings: Mapping[str, Any], inputs: Mapping[str, str]
) -> str:
    payload = canonical_json(
        {"stage": stage, "version": version, "settings": settings, "inputs": inputs}
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class ArtifactRef:
    """A published stage output: where it lives and what its manifest recorded."""

    stage: str
    key: str
    path: Path
    outputs: dict[str, Any]
    cache_hit: bool


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def work_dir(self, stage: str, key: str) -> Path:
        """Scratch space that survives a killed run (checkpoints); removed once published."""
        return self.root / stage / f".work-{key}"

    def lookup(self, stage: str, key: str) -> ArtifactRef | None:
        manifest = self.path(stage, key) / MANIFEST_FILE
        if not manifest.is_file():
            return None
        recorded = json.loads(manifest.read_text())
        return ArtifactRef(stage, key, manifest.parent, recorded["outputs"], cache_hit=True)

    def quarantine(self, ref: ArtifactRef, reason: str) -> Path:
        """Moves a damaged artifact aside (kept for inspection) so the next lookup misses."""
        target = ref.path.parent / f".corrupt-{ref.key}-{int(time.time())}"
        os.rename(ref.path, target)
        log.warning("quarantined %s artifact %s to %s: %s", ref.stage, ref.key, target, reason)
        return target

    @contextmanager
    def lock(self, stage: str, key: str) -> Iterator[None]:
        lock_path = self.root / stage / f".{key}.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with lock_path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def get_or_build(
        self,
        stage: str,
        key: str,
        build: Callable[[Path], dict[str, Any]],
        record: Mapping[str, Any],
        validate: Callable[[ArtifactRef], None] | None = None,
    ) -> ArtifactRef:
        """Returns the published artifact for `key`, building it first if absent or invalid.

        `validate` may raise to reject a cached artifact (a corrupt shard, say); the artifact is
        then quarantined and rebuilt, so a rerun heals the store instead of failing forever.
        """
        with self.lock(stage, key):
            # Under the lock no build of this key is running: any temp dir is a killed run's,
            # cleared here even when the key is a cache hit (another run published it since).
            for stale in (self.root / stage).glob(f".tmp-{key}-*"):
                shutil.rmtree(stale, ignore_errors=True)
            cached = self.lookup(stage, key)
            if cached is not None and validate is not None:
                try:
                    validate(cached)
                except Exception as error:
                    self.quarantine(cached, str(error))
                    cached = None
            if cached is not None:
                return cached
            return self._build_and_publish(stage, key, build, record)

    def _build_and_publish(
        self,
        stage: str,
        key: str,
        build: Callable[[Path], dict[str, Any]],
        record: Mapping[str, Any],
    ) -> ArtifactRef:
        stage_dir = self.root / stage
        temp_dir = stage_dir / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        temp_dir.mkdir(parents=True)
        try:
            outputs = build(temp_dir)
            manifest = {
                "stage": stage,
                "key": key,
                "created_at": time.time(),
                "outputs": outputs,
                **record,
            }
            write_json_durably(temp_dir / MANIFEST_FILE, manifest)
            os.rename(temp_dir, self.path(stage, key))
        except BaseException:
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise
        shutil.rmtree(self.work_dir(stage, key), ignore_errors=True)
        return ArtifactRef(stage, key, self.path(stage, key), outputs, cache_hit=False)


def replace_json(path: Path, value: Any) -> None:
    """Writes `path` whole or not at all: a kill mid-write leaves the previous file (or none),
    never a truncated one that a resumed run would fail to parse."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(value))
    os.replace(partial, path)


def write_json_durably(path: Path, value: Any) -> None:
    with path.open("w") as handle:
        json.dump(value, handle, indent=2, sort_keys=True, default=str)
        handle.flush()
        os.fsync(handle.fileno())
