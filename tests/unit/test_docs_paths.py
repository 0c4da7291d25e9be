"""The README's tour and docs/architecture.md name files that exist: a rename updates the map of
the code with it, or this fails naming the stale name. The README stays short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fakes import REPO

MAPS = ("README.md", "docs/architecture.md")
TOP = r"(?:flows|lightning_modules|benchmarks|tests|conf|infra)"
# `flows/core/keys.py`, `conf/<group>/base.yaml`, `lightning_modules/export*.py`, `tests/unit/`
PATH = re.compile(rf"(?<![\w./-]){TOP}/[\w./*<>-]*")
# `flows.orchestration.rank_entry`, `python -m flows.lift`
MODULE = re.compile(r"(?<![\w./-])(?:flows|lightning_modules)(?:\.\w+)+")
# a tour entry's names: `artifacts.py`, `shards/`, `export*.py`
NAME = re.compile(r"(?<![\w./<-])[\w*]+(?:\.py|/)(?![\w/])")


def exists(path: str) -> bool:
    """A path, with `<placeholders>` and `*` matching any one name."""
    pattern = re.sub(r"<[^>]+>", "*", path.rstrip("./"))
    return any(REPO.glob(pattern)) if "*" in pattern else (REPO / pattern).exists()


def module_exists(dotted: str) -> bool:
    """`a.b.c`: folders down to a module file; what follows the file is an attribute."""
    folder = REPO / dotted.split(".")[0]
    for part in dotted.split(".")[1:]:
        if (folder / f"{part}.py").is_file():
            return True
        if not (folder / part).is_dir():
            return False
        folder = folder / part
    return True


@pytest.mark.parametrize("document", MAPS)
def test_every_path_and_module_a_map_names_exists(document: str) -> None:
    text = (REPO / document).read_text()
    stale = sorted(
        {path for path in PATH.findall(text) if not exists(path)}
        | {module for module in MODULE.findall(text) if not module_exists(module)}
    )
    assert not stale, f"{document} names what does not exist: {stale}"


def tour_lines() -> list[str]:
    """The lines of the README's `A tour of the code` block."""
    section = (REPO / "README.md").read_text().split("## A tour of the code", 1)[1]
    return section.split("```", 2)[1].strip("\n").splitlines()


def tour_names() -> list[tuple[Path, str]]:
    """Each (folder, name) of the tour: a line opens with a path from the top; the names after it,
    on that line and the indented ones below, sit in its folder, beside it, or in the folder the
    line named last (`tests/ (unit/ ...)`)."""
    entries: list[tuple[Path, str]] = []
    folder = REPO
    for line in tour_lines():
        if not line.startswith(" "):
            head, _, line = line.partition(" ")
            folder = REPO / (head if head.endswith("/") else str(Path(head).parent))
            entries.append((REPO, head))
        entries += [(folder, name) for name in NAME.findall(line)]
    return entries


def found(folder: Path, name: str, last: Path) -> Path | None:
    for place in (folder, folder.parent, last):
        hits = sorted(place.glob(name.rstrip("/")))
        if hits:
            return hits[0]
    return None


def test_every_file_and_folder_the_tour_lists_exists() -> None:
    missing, last = [], REPO
    for folder, name in tour_names():
        hit = found(folder, name, last)
        if hit is None:
            missing.append(f"{folder.relative_to(REPO)}/{name}")
        elif hit.is_dir():
            last = hit
    assert tour_names() and not missing, f"the README's tour lists what does not exist: {missing}"


def test_the_readme_stays_short() -> None:
    size = len((REPO / "README.md").read_bytes())
    assert size < 12_288, f"README.md is {size:,} bytes: move depth into docs/ (12,288 at most)"
