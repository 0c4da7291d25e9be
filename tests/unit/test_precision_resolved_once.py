"""`trainer.precision` is resolved once per run, by the run's plan, and only read after that.

The plan (`flows/plan.py`, `resolved_trainer`) is the one caller of the resolver; every stage
and the Trainer factory read the precision they are given, so no two parts of one run can pick
different precisions, and the rule that 16-mixed needs CUDA has one home. The benchmarks, which
run no plan, resolve through the plan's function too, and which device an accelerator trains on
is read in one place. Read from the source with `ast`, as the layering test reads imports: a new
call anywhere in `flows/`, `lightning_modules/` or `benchmarks/` fails here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests.fakes import REPO

# The resolver and what only it may call: the hardware detection and the choice itself.
RESOLVER = "resolve_precision"
RESOLVER_PARTS = ("choose_precision", "detect_hardware")


# Where code that trains or measures training lives.
SOURCES = ("flows", "lightning_modules", "benchmarks")


def sources() -> list[Path]:
    return sorted(path for folder in SOURCES for path in (REPO / folder).rglob("*.py"))


def call_sites(names: set[str]) -> dict[str, set[str]]:
    """Each name in `names` -> `path:function` of every call to it in `SOURCES`, lazy or not."""
    sites: dict[str, set[str]] = defaultdict(set)
    for path in sources():
        tree = ast.parse(path.read_text(), str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call):
                    callee = node.func
                    name = callee.attr if isinstance(callee, ast.Attribute) else None
                    name = callee.id if isinstance(callee, ast.Name) else name
                    if name in names:
                        where = f"{path.relative_to(REPO)}:{function.name}"
                        sites[name].add(where)
    return sites


def test_the_precision_resolver_is_called_from_one_place() -> None:
    sites = call_sites({RESOLVER, *RESOLVER_PARTS, "resolved_trainer"})
    assert sites[RESOLVER] == {"flows/plan.py:resolved_trainer"}
    # In the pipeline, a run's plan, once per run; elsewhere only benchmarks, which run no plan.
    outside_benchmarks = {s for s in sites["resolved_trainer"] if not s.startswith("benchmarks/")}
    assert outside_benchmarks == {"flows/plan.py:from_run_config"}
    assert "benchmarks/precision_rows.py:auto_precision" in sites["resolved_trainer"]
    for part in RESOLVER_PARTS:
        assert sites[part] == {"flows/training/precision_choice.py:resolve_precision"}, part


def test_which_device_an_accelerator_trains_on_is_read_in_one_place() -> None:
    """The resolver's hardware detection and a mixed-precision Trainer's autocast device ask the
    same function, so they cannot disagree about an accelerator."""
    sites = call_sites({"trains_on_cuda", "cuda_available"})
    assert sites["trains_on_cuda"] == {
        "flows/training/hardware.py:detect_hardware",
        "flows/training/precision.py:__init__",
    }
    assert sites["cuda_available"] == {"flows/training/hardware.py:trains_on_cuda"}


def test_no_stage_resolves_a_precision_again() -> None:
    """The settings class has no resolving method any more: a stage cannot call one."""
    from flows.training.settings import TrainerSettings

    assert not hasattr(TrainerSettings, "resolved")


def test_the_cuda_rule_of_16_mixed_has_one_home() -> None:
    homes = [
        str(path.relative_to(REPO))
        for path in sources()
        if "16-mixed needs a CUDA" in path.read_text()  # a GPU (the rule), a device (a copy)
    ]
    assert homes == ["flows/training/precision_choice.py"]
    assert set(call_sites({"refuse_fp16_off_cuda"})["refuse_fp16_off_cuda"]) == {
        "flows/training/settings.py:_fits_together",  # as configured: trainer.accelerator=cpu
        "flows/training/precision_choice.py:choose_precision",  # on the device resolved
        "benchmarks/precision_rows.py:skip_reason",  # a benchmark row's device
    }


def test_a_trainer_refuses_a_precision_nobody_resolved(tmp_path: Path) -> None:
    """A caller outside a run that passes `auto` is told where it is resolved, not guessed for."""
    from flows.training.settings import TrainerSettings
    from flows.training.trainer import make_trainer

    with pytest.raises(ValueError, match=r"trainer\.precision=auto reached a Trainer"):
        make_trainer(TrainerSettings(), tmp_path, [], [])
