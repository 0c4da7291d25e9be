"""The fine-tuning walk stays small enough to read: the finetune stage keys, caches, resumes and
writes, and comes down once per task into flows/downstream/evaluate.py, which runs the task.

`finetune()` was once a 110-line conductor with a 77-line `build` nested in it, branching by hand
on student, base, QA and relation. So the stage's module holds at most 200 lines, and no function
of the walk (the stage's modules and the evaluation they come down into) runs over 60, a nested
one counted within its parent too. Read with `ast`, so a comment or a docstring counts as the
lines it takes, like code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.fakes import REPO

STAGE_MODULE = Path("flows/stages/finetune.py")
STAGE_LINES = 200
FUNCTION_LINES = 60
WALK = (
    STAGE_MODULE,
    Path("flows/stages/checkpoint_evaluation.py"),
    Path("flows/stages/finetune_progress.py"),
    Path("flows/stages/control_arm.py"),
    Path("flows/stages/lift_curve.py"),
    Path("flows/downstream/evaluate.py"),
    Path("flows/downstream/finetuning/cached_arm.py"),
    Path("flows/downstream/finetuning/lift_figures.py"),
)


def long_functions(source: str, limit: int) -> dict[str, int]:
    """Each function (a method, a nested one) longer than `limit` lines, by name: its lines."""
    return {
        node.name: length
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := (node.end_lineno or node.lineno) - node.lineno + 1) > limit
    }


def test_the_finetune_stage_module_holds_at_most_200_lines() -> None:
    lines = len((REPO / STAGE_MODULE).read_text().splitlines())
    assert lines <= STAGE_LINES, f"{STAGE_MODULE}: {lines} lines"


@pytest.mark.parametrize("path", WALK, ids=str)
def test_no_function_of_the_walk_runs_over_60_lines(path: Path) -> None:
    assert long_functions((REPO / path).read_text(), FUNCTION_LINES) == {}


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("def short():\n    return 1\n", {}),
        ("def long():\n" + "    x = 1\n" * 3, {"long": 4}),
        ("def outer():\n    def inner():\n" + "        x = 1\n" * 2, {"outer": 4, "inner": 3}),
        ("class C:\n    def method(self):\n" + "        x = 1\n" * 3, {"method": 4}),
    ],
)
def test_the_check_counts_every_function_nested_or_not(source: str, found: dict[str, int]) -> None:
    assert long_functions(source, 2) == found
