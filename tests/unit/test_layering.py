"""The package layout is the architecture: no import circles, and no layer imports a higher one.

Read from the source with `ast`, so the check costs milliseconds and sees imports inside
functions too (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import REPO

PACKAGES = ("flows", "lightning_modules")

# Lowest first; a module may import its own layer or a lower one. Longest prefix wins. Tracking
# (MLflow, Prefect's logs) needs only core; orchestration (Prefect tasks and runners, publishing,
# the run form, the torchrun entry) wires the stages.
LAYERS: list[tuple[str, ...]] = [
    ("lightning_modules",),
    ("flows.core",),
    ("flows.tracking",),
    ("flows.corpora", "flows.training"),
    ("flows.downstream",),
    ("flows.stages",),
    (
        "flows.pipeline",
        "flows.summary",
        "flows.plan",
        "flows.resolve",
        "flows.orchestration",
    ),
    (
        "flows.deploy",
        "flows.refresh",
        "flows.evaluate",
        "flows.compare",
        "flows.lift",
        "flows.conf_defaults",
        "flows.ui",
        "flows.__main__",
    ),
    ("flows.cloze",),  # the console script: each entry point above, imported when chosen
]
# What knows nothing of orchestration or tracking, however indirectly: the models and data, the
# sources, training, the downstream evaluation and the stages.
PLAIN = ("lightning_modules", "flows.corpora", "flows.training", "flows.downstream", "flows.stages")
ORCHESTRATION_LIBRARIES = ("prefect", "prefect_dask", "mlflow")
# The deployments and the domain refresh are siblings: what both need lives below them.
SIBLINGS = ("flows.deploy", "flows.refresh")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    }


def imported_names(path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every module `path` imports, lazily too; `from pkg import name` counts as `pkg.name` if
    that is a project module."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                yield name if name in known else node.module


def imported_modules(path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Project modules `path` imports."""
    yield from (name for name in imported_names(path, known) if name.split(".")[0] in PACKAGES)


def layer_of(module: str) -> int:
    matches = [
        (len(prefix), index)
        for index, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    if not matches:
        raise AssertionError(f"{module} belongs to no layer: add it to LAYERS in {__file__}")
    return max(matches)[1]


def import_graph() -> dict[str, set[str]]:
    known = all_modules()
    return {
        module: {name for name in imported_modules(path, known) if name in known} - {module}
        for module, path in known.items()
    }


def test_every_module_belongs_to_a_layer() -> None:
    for module in all_modules():
        if module not in PACKAGES:
            layer_of(module)


def test_no_module_imports_a_higher_layer() -> None:
    upward = [
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module not in PACKAGES
        for target in sorted(targets)
        if target not in PACKAGES and layer_of(target) > layer_of(module)
    ]
    assert upward == []


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_there_are_no_import_circles() -> None:
    assert find_cycle(import_graph()) is None


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
        ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
    ],
)
def test_the_cycle_finder_finds_circles(
    graph: dict[str, set[str]], expected: list[str] | None
) -> None:
    assert find_cycle(graph) == expected


def in_package(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def test_models_data_sources_training_downstream_and_stages_never_reach_prefect_or_mlflow() -> None:
    """Not directly and not through a project module they import (a lazy import counts)."""
    known = all_modules()
    graph = import_graph()
    libraries = {
        module: {
            name.split(".")[0]
            for name in imported_names(path, known)
            if name.split(".")[0] in ORCHESTRATION_LIBRARIES
        }
        for module, path in known.items()
    }
    reached = []
    for start in sorted(module for module in known if in_package(module, PLAIN)):
        route = {start: [start]}
        pending = [start]
        while pending:
            module = pending.pop()
            for library in sorted(libraries[module]):
                reached.append(f"{' -> '.join(route[module])} imports {library}")
            for target in sorted(graph[module] - set(route)):
                route[target] = [*route[module], target]
                pending.append(target)
    assert reached == []


def test_the_deployments_and_the_domain_refresh_import_nothing_of_each_other() -> None:
    crossing = [
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        for target in sorted(targets)
        for own, other in (SIBLINGS, SIBLINGS[::-1])
        if in_package(module, (own,)) and in_package(target, (other,))
    ]
    assert crossing == []
