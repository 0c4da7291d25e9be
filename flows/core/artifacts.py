"""Content-addressed, atomically published stage outputs; the project's one lock and one writer.

A stage's key hashes what determines its output (stage name and version, output-relevant settings,
the keys of its inputs), never paths, worker counts or devices. Outputs are built in a private temp
dir, `manifest.json` is written last, and the dir is renamed into place: a reader either sees a
complete artifact or none. A per-key file lock makes concurrent runs compute each stage once.

A stage whose builds are not all reproducible (the tokenizer: Unigram training is not) is
published content-addressed: its files' checksums name the artifact, and its input key becomes a
link to that name. Every
later key then follows the content, so two stores (or a rebuild after damage) holding different
builds for one input key can never pair them with each other's downstream artifacts.

Publishing never overwrites: when the key is already there (a run on another machine whose lock
this one could not see), the first artifact wins and the later run adopts it.

The store repairs itself: a folder without a readable manifest, or whose files no longer match
the checksums recorded at publish, is moved aside (`.corrupt-<key>-<time>`) and rebuilt, so a
rerun heals instead of failing forever. Verification cannot be skipped: every file of an
artifact has a checksum in its manifest, so a manifest without checksums, an entry for a missing
file, or a file without an entry is damage too. Reads stay in the store: a symbolic link (or
anything but a plain file or folder) inside an artifact, a checksum entry or a key that could
name a path outside it, and an input-key link that does not name a sibling are refused, and the
clean-up moves them aside like any damage: no fault in the store needs a human.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from filelock import FileLock, Timeout

from flows.core.disk import DiskFullError, is_disk_full

MANIFEST_FILE = "manifest.json"
CHECKSUMS = "checksums"  # manifest field: {relative file path: sha256 at publish}
STORE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")  # no separator, never "." or ".."
log = logging.getLogger(__name__)


class ArtifactError(RuntimeError):
    """A published artifact is damaged, or something read from it points outside the store."""


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def stage_key(
    stage: str, version: int, settings: Mapping[str, Any], inputs: Mapping[str, str]
) -> str:
    payload = canonical_json(
        {"stage": stage, "version": version, "settings": settings, "inputs": inputs}
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def is_store_name(value: object) -> bool:
    """Whether `value` can name a stage or key: one path component that stays where it is put."""
    return isinstance(value, str) and STORE_NAME.match(value) is not None


def confined(root: Path, relative: object, source: Path) -> Path:
    """`root / relative` when that stays inside `root`; anything else is refused, naming `source`.

    For paths read back from manifests and indexes: a crafted entry ("../../etc/passwd", an
    absolute path, a symlink out) must never make a loader read or trust a file elsewhere.
    """
    if not isinstance(relative, str) or not relative or Path(relative).is_absolute():
        raise ArtifactError(f"{source} names {relative!r}, which is not a relative file path")
    resolved_root = root.resolve()
    target = (root / relative).resolve()
    if not target.is_relative_to(resolved_root):
        raise ArtifactError(
            f"{source} names {relative!r}, which resolves outside {resolved_root}; refused"
        )
    return target


def read_manifest(path: Path) -> dict[str, Any]:
    """A manifest as a dict; a missing, truncated or malformed one is an ArtifactError naming it."""
    try:
        recorded = json.loads(path.read_text())
    except FileNotFoundError as error:
        raise ArtifactError(f"{path} is missing: the artifact was never completed") from error
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ArtifactError(f"{path} does not parse ({error})") from error
    if not isinstance(recorded, dict):
        raise ArtifactError(f"{path} is not a manifest (a JSON object)")
    return recorded


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def artifact_files(directory: Path) -> list[Path]:
    """Every file under `directory` but its manifest, sorted; a symbolic link, or anything that
    is neither a plain file nor a folder (a FIFO, a device), is refused naming it: read, it
    would lead outside the artifact (or block), whatever its name."""
    files = []
    for path in sorted(directory.rglob("*")):
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            raise ArtifactError(
                f"{path} is a symbolic link (to {os.readlink(path)!r}); an artifact holds only "
                "its own files: refused"
            )
        if stat.S_ISREG(mode):
            if path != directory / MANIFEST_FILE:
                files.append(path)
        elif not stat.S_ISDIR(mode):
            raise ArtifactError(f"{path} is not a plain file; refused")
    return files


def file_checksums(directory: Path) -> dict[str, str]:
    """sha256 of every file under `directory` except the manifest, by relative path."""
    return {
        str(path.relative_to(directory)): file_sha256(path) for path in artifact_files(directory)
    }


def verify_checksums(directory: Path, recorded: object, manifest: Path) -> None:
    """Raises ArtifactError naming the first file that is missing, unrecorded, or differs from
    publish time. Nothing recorded is damage, not a pass: it would leave every file unchecked."""
    if not isinstance(recorded, Mapping):
        raise ArtifactError(
            f"{manifest} records no checksums ({CHECKSUMS!r}): its files cannot be verified"
        )
    present = {str(path.relative_to(directory)) for path in artifact_files(directory)}
    paths = {relative: confined(directory, relative, manifest) for relative in recorded}
    unrecorded = sorted(present - set(recorded))
    if unrecorded:
        raise ArtifactError(
            f"{directory / unrecorded[0]} has no checksum in {manifest}: it cannot be verified"
        )
    for relative, expected in recorded.items():
        path = paths[relative]
        if relative not in present:
            raise ArtifactError(f"{path} is missing (recorded in {manifest})")
        actual = file_sha256(path)
        if actual != expected:
            raise ArtifactError(
                f"{path} does not match the checksum recorded at publish (expected "
                f"{str(expected)[:12]}, found {actual[:12]}): modified or damaged since"
            )


def content_key(stage: str, checksums: Mapping[str, str]) -> str:
    """The name of a content-addressed artifact: a hash of its files' checksums."""
    payload = canonical_json({"stage": stage, "content": checksums})
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class ArtifactRef:
    """A published stage output: where it lives and what its manifest recorded."""

    stage: str
    key: str
    path: Path
    outputs: dict[str, Any]
    cache_hit: bool


@dataclass(frozen=True)
class _Build:
    """One pending build of `stage`'s artifact `key`: the arguments get_or_build's steps share."""

    stage: str
    key: str
    build: Callable[[Path], dict[str, Any]]
    record: Mapping[str, Any]


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def path(self, stage: str, key: str) -> Path:
        """Where `stage`'s artifact `key` lives; a name that could leave the store is refused."""
        for what, name in (("stage", stage), ("key", key)):
            if not is_store_name(name):
                raise ArtifactError(
                    f"{what} {name!r} is not a store name (letters, digits, '.', '_', '-'; one "
                    f"path component): it could point outside the artifact store {self.root}"
                )
        return self.root / stage / key

    def work_dir(self, stage: str, key: str) -> Path:
        """Scratch space that survives a killed run (checkpoints); removed once published."""
        return self.path(stage, key).with_name(f".work-{key}")

    def lookup(self, stage: str, key: str) -> ArtifactRef | None:
        """The published artifact, verified against its checksums; None when there is none.

        Raises ArtifactError (naming the file) when the folder exists but its manifest is
        missing or does not parse, a file differs from what was published or has no checksum,
        or the folder (or anything in it) is a link or not a plain file.
        """
        key = self.resolve(stage, key)
        directory = self.path(stage, key)
        if not os.path.lexists(directory):
            return None
        if not stat.S_ISDIR(directory.lstat().st_mode):
            raise ArtifactError(f"{directory} is not a folder (a link or a file); refused")
        manifest = directory / MANIFEST_FILE
        if manifest.is_symlink():
            raise ArtifactError(f"{manifest} is a symbolic link; refused")
        recorded = read_manifest(manifest)
        if not isinstance(recorded.get("outputs"), dict):
            raise ArtifactError(f"{manifest} is not a manifest (no 'outputs' object)")
        verify_checksums(directory, recorded.get(CHECKSUMS), manifest)
        return ArtifactRef(stage, key, directory, recorded["outputs"], cache_hit=True)

    def resolve(self, stage: str, key: str) -> str:
        """The content key an input key links to (content-addressed stages); else `key` itself.

        A link is read, never followed blindly: its target must be a sibling store name.
        """
        link = self.path(stage, key)
        if not link.is_symlink():
            return key
        target = os.readlink(link)
        if not is_store_name(target):
            raise ArtifactError(
                f"{link} links to {target!r}, which is not a key in {link.parent}; refused"
            )
        return target

    def quarantine(self, stage: str, key: str, reason: str) -> Path:
        """Moves a damaged artifact aside (kept for inspection) so the next lookup misses.

        For an input-key link, that is the content it names, which later lookups would still
        trust; a link that names no sibling (refused by `resolve`) is itself moved aside.
        """
        with contextlib.suppress(ArtifactError):  # if raised, the link itself is the damage
            key = self.resolve(stage, key)
        source = self.path(stage, key)
        target = source.with_name(f".corrupt-{key}-{time.time_ns()}")
        os.rename(source, target)
        log.warning("quarantined %s artifact %s to %s: %s", stage, key, target, reason)
        return target

    @contextmanager
    def lock(self, stage: str, key: str) -> Iterator[None]:
        with file_lock(self.path(stage, key).with_name(f".{key}.lock")):
            yield

    def get_or_build(
        self,
        stage: str,
        key: str,
        build: Callable[[Path], dict[str, Any]],
        record: Mapping[str, Any],
        validate: Callable[[ArtifactRef], None] | None = None,
        content_addressed: bool = False,
    ) -> ArtifactRef:
        """Returns the published artifact for `key`, building it first if absent or invalid.

        A damaged artifact (no readable manifest, a checksum mismatch, a link, or `validate`
        raising) is quarantined and rebuilt, so a rerun heals the store instead of failing
        forever. `content_addressed=True` publishes under the content key and links `key` to it: the
        returned ref's key is the content key, which is what later stages' keys hash.
        """
        with self.lock(stage, key):
            # Under the lock no build of this key is running: any temp dir is a killed run's,
            # cleared here even when the key is a cache hit (another run published it since).
            for stale in (self.root / stage).glob(f".tmp-{key}-*"):
                shutil.rmtree(stale, ignore_errors=True)
            cached = self._verified(stage, key, validate)
            if cached is not None:
                return cached
            job = _Build(stage, key, build, record)
            return self._build_and_link(job) if content_addressed else self._build_and_publish(job)

    def _verified(
        self, stage: str, key: str, validate: Callable[[ArtifactRef], None] | None
    ) -> ArtifactRef | None:
        try:
            cached = self.lookup(stage, key)
            if cached is not None and validate is not None:
                validate(cached)
        except Exception as error:
            self.quarantine(stage, key, str(error))
            return None
        return cached

    def _build_and_publish(self, job: _Build) -> ArtifactRef:
        temp_dir, manifest = self._build(job)
        ref = self._publish(job.stage, job.key, temp_dir, manifest)
        shutil.rmtree(self.work_dir(job.stage, job.key), ignore_errors=True)
        return ref

    def _build_and_link(self, job: _Build) -> ArtifactRef:
        """Builds, publishes under the content key, then links the input key to it."""
        stage, key = job.stage, job.key
        temp_dir, manifest = self._build(job)
        content = content_key(stage, manifest[CHECKSUMS])
        manifest.update(key=content, input_key=key)
        replace_json(temp_dir / MANIFEST_FILE, manifest, default=str)
        ref = self._publish(stage, content, temp_dir, manifest)
        linked = self._link(stage, key, ref.key)
        shutil.rmtree(self.work_dir(stage, key), ignore_errors=True)
        if linked == ref.key:
            return ref
        first = self.lookup(stage, linked)
        if first is None:
            raise ArtifactError(f"{self.path(stage, key)} links to {linked}, which is missing")
        return first

    def _build(self, job: _Build) -> tuple[Path, dict[str, Any]]:
        """The built files in a private temp dir, with their manifest written last."""
        temp_dir = self.root / job.stage / f".tmp-{job.key}-{uuid.uuid4().hex[:8]}"
        temp_dir.mkdir(parents=True)
        try:
            outputs = job.build(temp_dir)
            manifest = {
                "stage": job.stage,
                "key": job.key,
                "created_at": time.time(),
                "outputs": outputs,
                **job.record,
                CHECKSUMS: file_checksums(temp_dir),
            }
            replace_json(temp_dir / MANIFEST_FILE, manifest, default=str)
        except BaseException:
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise
        return temp_dir, manifest

    def _publish(
        self, stage: str, key: str, temp_dir: Path, manifest: dict[str, Any]
    ) -> ArtifactRef:
        """Renames `temp_dir` into place; if `key` is already there, the first one wins.

        A rename never replaces a published artifact: one that appeared meanwhile (another
        machine's run, whose lock this one could not see) is verified and adopted.
        """
        try:
            os.rename(temp_dir, self.path(stage, key))
        except OSError:
            shutil.rmtree(temp_dir, ignore_errors=True)
            first = self.lookup(stage, key) if self.path(stage, key).exists() else None
            if first is None:
                raise
            log.warning("%s %s was already published (another run's); adopting it", stage, key)
            return first
        return ArtifactRef(stage, key, self.path(stage, key), manifest["outputs"], cache_hit=False)

    def _link(self, stage: str, key: str, content: str) -> str:
        """Points input key `key` at `content`; a link already there (another run's) wins.

        Returns the content key the link names once this returns: this build's or the first's.
        """
        link = self.path(stage, key)
        if link.is_symlink() and not link.exists():
            link.unlink()  # its content was quarantined: relink to the rebuild
        try:
            os.symlink(content, link)
        except FileExistsError:
            first = self.resolve(stage, key)
            if first != content:
                log.warning("%s %s links to %s, another run's build: adopted", stage, key, first)
            return first
        return content


@contextmanager
def file_lock(path: Path, waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """The project's one inter-process lock (a `filelock` on `path`, created if needed).

    `waiting` is called once if another process holds the lock, before this one waits for it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if waiting is not None:
            waiting()
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


@contextmanager
def atomic_file(path: Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """The project's one atomic writer: `path` is written whole or not at all.

    The bytes go to a temp file beside `path` (same directory, so the same filesystem: never
    $TMPDIR, whose cross-device move is a copy that a kill leaves half done), are fsynced, and
    only then renamed over `path`. A kill or a full disk mid-write leaves the previous file.
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial")
    try:
        with temp.open(mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException as error:
        temp.unlink(missing_ok=True)
        if is_disk_full(error) and not isinstance(error, DiskFullError):
            raise DiskFullError(path) from error  # the writer's own error names no file
        raise
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Makes a rename in `directory` durable (a power cut could otherwise undo it)."""
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def replace_json(path: Path, value: Any, default: Callable[[Any], Any] | None = None) -> None:
    """Writes `value` as JSON to `path` atomically; serialised first, so a bad value writes none."""
    text = json.dumps(value, indent=2, sort_keys=True, default=default)
    with atomic_file(path, "w") as handle:
        handle.write(text)
