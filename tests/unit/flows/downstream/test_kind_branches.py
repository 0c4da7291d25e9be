"""A task kind's code lives in its module under flows/downstream/kinds/, behind one protocol:
nothing else compares a task's kind with a kind's name or matches on one.

A branch on a kind's name elsewhere is how adding question answering came to touch 24 files: a
new kind must be one module and its registry row. Read with `ast`, so a comment or a docstring
naming a kind is no branch, and a branch written any way (`==`, `!=`, `in (...)`, `match`) is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from flows.downstream.kinds.registry import TASK_KINDS
from tests.fakes import REPO

KINDS_PACKAGE = Path("flows/downstream/kinds")
# Modules that still branch on a kind's name, and why it has not moved yet. This list must only
# shrink: moving a site into its kind removes its entry (a test fails on an entry with no branch
# left), and no entry may be added.
REMAINING = {
    # Config validation (what fields and metrics a kind takes, its default metric): TaskSpec is
    # read by the readers that the kinds import, so it cannot ask the registry without a circle.
    "flows/downstream/tasks/spec.py",
    # Records and hub rows to examples: a tagged sentence, a question, a label set or a labelled
    # text; the kinds read through these readers, so they cannot dispatch back to the kinds.
    "flows/downstream/tasks/record_readers.py",
    "flows/downstream/tasks/hub.py",
}


def is_kind_name(node: ast.AST, names: set[str]) -> bool:
    """A kind's name as a literal, or a tuple, list or set of literals holding one."""
    if isinstance(node, ast.Constant):
        return node.value in names
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(is_kind_name(element, names) for element in node.elts)
    return False


def kind_branches(source: str, names: set[str]) -> list[int]:
    """Lines comparing with, testing membership in, or matching on a kind's name."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            if any(is_kind_name(operand, names) for operand in [node.left, *node.comparators]):
                lines.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and is_kind_name(node.value, names):
            lines.append(node.lineno)
    return sorted(lines)


def modules_with_branches() -> dict[str, list[int]]:
    names = set(TASK_KINDS)
    found = {}
    for path in sorted((REPO / "flows").rglob("*.py")):
        relative = path.relative_to(REPO)
        if relative.is_relative_to(KINDS_PACKAGE):
            continue
        lines = kind_branches(path.read_text(), names)
        if lines:
            found[relative.as_posix()] = lines
    return found


def test_no_module_outside_the_kinds_branches_on_a_kind_name() -> None:
    found = modules_with_branches()
    unexpected = {module: lines for module, lines in found.items() if module not in REMAINING}
    assert unexpected == {}, "move these branches into their kind (flows/downstream/kinds/)"


def test_every_remaining_site_still_branches_so_the_list_only_shrinks() -> None:
    moved = REMAINING - set(modules_with_branches())
    assert moved == set(), "these sites no longer branch on a kind: remove them from REMAINING"


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ('if spec.kind == "relation":\n    pass\n', [1]),
        ('x = kind != "question_answering"\n', [1]),
        ('x = spec.kind in ("classification", "other")\n', [1]),
        ('match spec.kind:\n    case "token_classification":\n        pass\n', [2]),
        ('if corpus.kind == "files":\n    pass\n', []),  # not a task kind
        ('"""A relation task: kind == "relation" in prose."""\n', []),
    ],
)
def test_the_check_sees_each_way_of_branching_on_a_kind(source: str, lines: list[int]) -> None:
    assert kind_branches(source, set(TASK_KINDS)) == lines
