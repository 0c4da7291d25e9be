"""The default downstream task: which Library Reference chapter documents a stdlib module.

Each example is one docstring; its label is the chapter of the Python Library Reference
(docs.python.org/3/library) that documents its module. The mapping below is written from the
reference's table of contents for eight chapters with enough documented code to learn from;
modules of other chapters are not used as examples. Train, validation and test are split by
module, so no module's text appears on two sides.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache

from flows.corpora.stdlib_docs import stdlib_docstrings

CHAPTERS: dict[str, tuple[str, ...]] = {
    "Numeric and Mathematical Modules": (
        "numbers",
        "math",
        "cmath",
        "decimal",
        "_pydecimal",
        "fractions",
        "random",
        "statistics",
    ),
    "Data Types": (
        "datetime",
        "zoneinfo",
        "calendar",
        "collections",
        "heapq",
        "bisect",
        "array",
        "weakref",
        "types",
        "copy",
        "pprint",
        "reprlib",
        "enum",
        "graphlib",
    ),
    "File and Directory Access": (
        "pathlib",
        "posixpath",
        "ntpath",
        "genericpath",
        "fileinput",
        "stat",
        "filecmp",
        "tempfile",
        "glob",
        "fnmatch",
        "linecache",
        "shutil",
    ),
    "Data Compression and Archiving": (
        "zlib",
        "gzip",
        "bz2",
        "lzma",
        "zipfile",
        "tarfile",
        "_compression",
    ),
    "Concurrent Execution": (
        "threading",
        "multiprocessing",
        "concurrent",
        "subprocess",
        "sched",
        "queue",
        "contextvars",
        "_threading_local",
    ),
    "Networking and Interprocess Communication": (
        "asyncio",
        "socket",
        "ssl",
        "select",
        "selectors",
        "signal",
        "mmap",
    ),
    "Internet Data Handling": (
        "email",
        "json",
        "mailbox",
        "mimetypes",
        "base64",
        "binascii",
        "quopri",
    ),
    "Internet Protocols and Support": (
        "webbrowser",
        "wsgiref",
        "urllib",
        "http",
        "ftplib",
        "poplib",
        "imaplib",
        "smtplib",
        "uuid",
        "socketserver",
        "xmlrpc",
        "ipaddress",
    ),
}
LABELS: tuple[str, ...] = tuple(CHAPTERS)
SPLIT_FRACTIONS = {"test": 0.2, "validation": 0.1}


def chapter_of(module: str) -> str | None:
    for chapter, prefixes in CHAPTERS.items():
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return chapter
    return None


def module_split(module: str) -> str:
    """`train`, `validation` or `test` for a module; modules outside the task are `train`."""
    return module_splits().get(module, "train")


@lru_cache(maxsize=1)
def module_splits() -> dict[str, str]:
    """Assigns whole modules to splits, chapter by chapter, in the order of a hash of their names.

    Stratifying by chapter keeps every label on every side even though module sizes vary by two
    orders of magnitude; a module goes to a side only while that side stays near its share.
    """
    sizes: dict[str, Counter[str]] = defaultdict(Counter)
    for docstring in stdlib_docstrings():
        chapter = chapter_of(docstring.module)
        if chapter is not None:
            sizes[chapter][docstring.module] += 1
    assignment: dict[str, str] = {}
    for modules in sizes.values():
        total = sum(modules.values())
        taken = Counter[str]()
        for module in sorted(modules, key=lambda name: hashlib.sha256(name.encode()).digest()):
            size = modules[module]
            side = next(
                (
                    split
                    for split, share in SPLIT_FRACTIONS.items()
                    if taken[split] + size <= share * total * 1.25
                ),
                "train",
            )
            taken[side] += size
            assignment[module] = side
    return assignment


@dataclass(frozen=True)
class LabelledText:
    text: str
    label: int


@dataclass
class ClassificationData:
    labels: tuple[str, ...]
    splits: dict[str, list[LabelledText]]


def load_pydoc_topics(
    min_words: int, max_train_examples: int | None, seed: int
) -> ClassificationData:
    splits: dict[str, list[LabelledText]] = {"train": [], "validation": [], "test": []}
    seen: set[str] = set()
    for docstring in stdlib_docstrings():
        chapter = chapter_of(docstring.module)
        if chapter is None or len(docstring.text.split()) < min_words or docstring.text in seen:
            continue
        seen.add(docstring.text)
        example = LabelledText(docstring.text, LABELS.index(chapter))
        splits[module_split(docstring.module)].append(example)
    if max_train_examples is not None and len(splits["train"]) > max_train_examples:
        # A seeded sample, not a prefix: a prefix would hold only the alphabetically first modules.
        splits["train"] = random.Random(seed).sample(splits["train"], max_train_examples)
    return ClassificationData(LABELS, splits)
