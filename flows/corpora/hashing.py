"""Content hashes of corpus files, cached by file identity so an unchanged file is read once.

The key of a corpus is made of what its files hold, never where they are: the same bytes under
another path give the same key, and a file edited in place gives a new one even when its size
and mtime were kept. Hashing is xxh3-128 (several GB/s; this detects change, it is no defence
against someone crafting a collision). A hash is reused while the file's identity is unchanged:
path, size, mtime, ctime, inode and device. ctime is in it because a program can set mtime back
(`touch -d`, `cp -p`, `rsync -t`) but not ctime: any write or metadata change moves it.

The cache lives in memory per process and, when `CLOZE_HASH_CACHE` names a file (the CLI sets
it to `<paths.root>/cache/file-hashes.json`), on disk across runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import xxhash

from flows.core.artifacts import file_lock, replace_json
from flows.corpora.formats import reading

HASH_CACHE_ENV = "CLOZE_HASH_CACHE"
log = logging.getLogger(__name__)
_MEMO: dict[str, tuple[str, str]] = {}  # path -> (identity, hash)


def identity(path: Path) -> str:
    stat = path.stat()
    return ":".join(
        str(value)
        for value in (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev)
    )


def content_hash(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, xxhash.xxh3_128).hexdigest()


def content_hashes(paths: list[Path]) -> list[str]:
    """The content hash of each file, in order; only files new or changed since are read."""
    cache_file = os.environ.get(HASH_CACHE_ENV)
    known = dict(_MEMO)
    if cache_file:
        known |= load_cache(Path(cache_file))
    hashes, fresh = [], {}
    for path in paths:
        with reading(path):  # vanished since the run started, EIO: named, exit 2
            before = identity(path)
            entry = known.get(str(path))
            if entry is not None and entry[0] == before:
                digest = entry[1]
            else:
                digest = content_hash(path)
                if identity(path) == before:  # a file changed while read is hashed again later
                    fresh[str(path)] = (before, digest)
        hashes.append(digest)
    _MEMO.update(fresh)
    if cache_file and fresh:
        save_cache(Path(cache_file), fresh)
    return hashes


def load_cache(path: Path) -> dict[str, tuple[str, str]]:
    """The on-disk cache; an unreadable one is only a slower run (logged, then rebuilt)."""
    try:
        raw = json.loads(path.read_text())
        return {name: (entry[0], entry[1]) for name, entry in raw.items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, IndexError, AttributeError) as error:
        log.warning("ignoring the file-hash cache %s (%s); files are hashed afresh", path, error)
        return {}


def save_cache(path: Path, fresh: dict[str, tuple[str, str]]) -> None:
    """Merges `fresh` into the cache file: one entry per path, so it never grows past the corpus."""
    try:
        with file_lock(path.with_name(f".{path.name}.lock")):
            merged = load_cache(path) | fresh
            replace_json(path, {name: list(entry) for name, entry in merged.items()})
    except OSError as error:  # a read-only or full home: the run goes on, uncached
        log.warning("cannot update the file-hash cache %s (%s)", path, error)
