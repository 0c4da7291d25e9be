"""A task kind's code lives in its module under flows/downstream/kinds/, behind one protocol:
nothing else compares a task's kind with a kind's name or matches on one.

A branch on a kind's name elsewhere is how adding question answering came to touch 24 files: a
new kind must be one module and its registry row. Read with `ast`, so a comment or a docstring
naming a kind is no branch, and a branch written any way (`==`, `!=`, `in (...)`, `match`) is.
Config validation and the record readers, which the kinds' modules import, read what a kind
implies from its row of kinds/facts.py instead of asking the registry.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from flows.downstream.kinds.facts import KIND_FACTS
from flows.downstream.kinds.registry import TASK_KINDS
from tests.fakes import REPO

KINDS_PACKAGE = Path("flows/downstream/kinds")


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
    assert found == {}, "move these branches into their kind (flows/downstream/kinds/)"


def test_every_kind_has_its_facts_and_they_agree_with_its_module() -> None:
    assert list(KIND_FACTS) == list(TASK_KINDS)
    for name, kind in TASK_KINDS.items():
        facts = KIND_FACTS[name]
        assert (facts.has_labels, facts.decodes_spans) == (kind.has_labels, kind.decodes_spans)


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
