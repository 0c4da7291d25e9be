"""The stages that run on torch, named here and imported when a task first calls one.

A served run is a fresh Python process (Prefect's runner spawns it, no fork) that imports the
flow's module before the flow starts. The checkpoint import, pretrain, distill, finetune and
curve stages import torch, Lightning and transformers: seconds of imports that the tokenizer and
shards stages, which a run starts with, do not need (docs/results/2026-12-03-served-start.md).
The pipeline calls them as `training_stages.pretrain(...)`: each attribute is looked up in its
module on first use (PEP 562), and mypy reads the real signatures through the imports below.
tests/unit/flows/deploy/test_served_imports.py holds the line: importing the flow loads none of
them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flows.stages.checkpoint_evaluation import evaluate_checkpoint
    from flows.stages.distill import distill
    from flows.stages.finetune import finetune
    from flows.stages.label_curve import label_curve
    from flows.stages.lift_curve import lift_curve
    from flows.stages.pretrain import pretrain
    from flows.stages.public_import import import_checkpoint

# Each name and the module it lives in.
HOMES = {
    "import_checkpoint": "flows.stages.public_import",
    "distill": "flows.stages.distill",
    "evaluate_checkpoint": "flows.stages.checkpoint_evaluation",
    "finetune": "flows.stages.finetune",
    "label_curve": "flows.stages.label_curve",
    "lift_curve": "flows.stages.lift_curve",
    "pretrain": "flows.stages.pretrain",
}
__all__ = [
    "distill",
    "evaluate_checkpoint",
    "finetune",
    "import_checkpoint",
    "label_curve",
    "lift_curve",
    "pretrain",
]


if not TYPE_CHECKING:  # mypy sees the imports above instead, so a misspelt name is an error

    def __getattr__(name: str) -> Any:
        if name not in HOMES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(import_module(HOMES[name]), name)
