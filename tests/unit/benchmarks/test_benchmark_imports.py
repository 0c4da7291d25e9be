"""Every project name a benchmark imports exists. Benchmarks import inside their functions (so
`--help` stays fast), where a rename in `flows/` breaks them only when someone next measures:
`finetune_ceiling.py` imported `run_seeds` for a while after the plan replaced it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from tests.fakes import REPO

PROJECT = ("flows", "lightning_modules", "benchmarks")


def project_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of each `from <project module> import name` in `path`."""
    return [
        (node.lineno, node.module, alias.name)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        if node.module.split(".")[0] in PROJECT
        for alias in node.names
    ]


def resolves(module: str, name: str) -> bool:
    """`from module import name` would work: an attribute, or a submodule of that name."""
    if hasattr(importlib.import_module(module), name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")
    except ModuleNotFoundError:
        return False
    return True


def test_every_project_name_a_benchmark_imports_exists() -> None:
    sources = sorted((REPO / "benchmarks").rglob("*.py"))
    missing = [
        f"{path.relative_to(REPO)}:{line} from {module} import {name}"
        for path in sources
        for line, module, name in project_imports(path)
        if not resolves(module, name)
    ]
    assert sources and not missing, f"benchmarks import names the project no longer has: {missing}"
