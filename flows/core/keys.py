"""The one rule for when an artifact key moves: exactly when the stage's output for a config does.

A stage's key (flows/core/artifacts.py `stage_key`) hashes its name, its `VERSION`, the settings
that change its output and its inputs' keys. tests/unit/test_artifact_keys.py pins the keys of
the shipped configs, so a key can move only on purpose, and only in one of these ways, which are
the same rule:

- **The code changes what a stage writes for a config it already accepted**: bump the stage's
  `VERSION`, re-pin, and say in the commit why the output changed. Every key of the stage moves,
  because every output may have.
- **A setting is added**: its default must reproduce what the stage wrote before it existed, so
  at the default nothing has changed and the key must not move; set off it, the output changes
  and so does the key. Such a field is declared opt-in (the `OPT_IN*` tuple beside its class) and
  `opt_ins_at_default` drops it from the key while it holds its default. A new setting whose
  default changes the output is the first case: bump `VERSION` and key it like any other field.
- **A task kind's code changes what its tasks score**: the kind's own version (question
  answering's `QA_DECODING` in flows/downstream/tasks/spec.py, `results_version` in
  flows/downstream/kinds/facts.py) is in its tasks' keys alone, so they move and no other
  kind's do.

Nothing else moves a key: not a renamed preset or display name, not a path, worker count or
device (those are never keyed), not a refactor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from pydantic import BaseModel


def opt_ins_at_default(settings: object, opt_in: Collection[str]) -> set[str]:
    """The opt-in fields of `settings` (a pydantic model or a dataclass) that hold their declared
    default: what its key leaves out, so adding them moved no existing key."""
    defaults = _defaults(settings)
    unknown = [name for name in opt_in if name not in defaults]
    if unknown:
        raise ValueError(f"{type(settings).__name__} has no defaulted field {unknown}")
    return {name for name in opt_in if getattr(settings, name) == defaults[name]}


def _defaults(settings: object) -> dict[str, Any]:
    if isinstance(settings, BaseModel):
        return {
            name: field.default
            for name, field in type(settings).model_fields.items()
            if not field.is_required()
        }
    if not dataclasses.is_dataclass(settings):
        raise TypeError(f"{type(settings).__name__} is neither a pydantic model nor a dataclass")
    return {
        field.name: field.default
        for field in dataclasses.fields(settings)
        if field.default is not dataclasses.MISSING
    }
