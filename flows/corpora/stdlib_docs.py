"""Harvests the English documentation that ships with every CPython: docstrings and pydoc topics.

Docstrings are read with `ast` from the standard library's source files rather than by importing
the modules: importing all of the stdlib has side effects (`antigravity` opens a browser) and
depends on optional C extensions, while parsing is deterministic and needs nothing installed.
"""

from __future__ import annotations

import ast
import hashlib
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

SKIPPED_TOP_LEVEL = frozenset(
    {
        "site-packages",
        "dist-packages",
        "test",
        "idlelib",
        "lib2to3",
        "turtledemo",
        "__phello__",
        "ensurepip",
    }
)
DOCUMENTED_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class Docstring:
    module: str
    text: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_module_files() -> list[tuple[str, Path]]:
    """(dotted module name, source file) for every documented stdlib module, sorted by name."""
    root = stdlib_root()
    modules = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if relative.parts[0] in SKIPPED_TOP_LEVEL or {"test", "tests"} & set(relative.parts[:-1]):
            continue
        parts = list(relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts and all(part.isidentifier() for part in parts):
            modules.append((".".join(parts), path))
    return sorted(modules)


def stdlib_fingerprint() -> str:
    """Changes when the Python build changes; the text is a pure function of these files."""
    digest = hashlib.sha256(sys.version.encode())
    for name, path in stdlib_module_files():
        digest.update(f"{name}:{path.stat().st_size}\n".encode())
    return digest.hexdigest()[:20]


def module_docstrings(name: str, path: Path) -> Iterator[Docstring]:
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):
        return  # a few stdlib files are templates or need a newer grammar; they hold no prose
    for node in ast.walk(tree):
        if isinstance(node, DOCUMENTED_NODES):
            text = ast.get_docstring(node, clean=True)
            if text:
                yield Docstring(name, text)


@lru_cache(maxsize=1)
def stdlib_docstrings() -> tuple[Docstring, ...]:
    """All docstrings, parsed once per process: the corpus and the downstream task share them."""
    return tuple(
        doc for name, path in stdlib_module_files() for doc in module_docstrings(name, path)
    )


def pydoc_topics() -> Iterator[str]:
    """The language reference topics `help()` shows (keywords, operators, statements)."""
    from pydoc_data.topics import topics

    for name in sorted(topics):
        yield topics[name]
