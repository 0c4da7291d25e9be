"""`conf/<group>/base.yaml`, written from the settings class that reads the group.

A default has one home: its settings class, with a one-line description under each field. The
base file every preset of a group extends (`defaults: [base, _self_]`) is generated from that
class, so Hydra composes every key and `--cfg` shows it, and a preset holds only what it changes.
`python -m flows.conf_defaults` rewrites the base files; tests/unit/test_conf.py fails while one
is stale, and while a preset repeats a value of its base.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from flows.core.config import BASE, CONF_DIR
from flows.core.paths import PathSettings
from flows.core.settings import Settings
from flows.corpora import CorpusSettings
from flows.downstream.settings import FinetuneSettings
from flows.plan import InitSettings, RefreshSettings
from flows.stages.distill_plan import DistillSettings
from flows.stages.objectives import ObjectiveSettings
from flows.stages.shards.stage import ShardSettings
from flows.stages.tokenizer import TokenizerSettings
from flows.tracking.settings import TrackingSettings
from flows.training.settings import ModelSettings, TrainerSettings

# Every config group of a run and the class that reads it (`deploy` is no part of a run's
# config: conf/deploy/ is read as it is, by flows/deploy/settings.py).
GROUPS: dict[str, type[Settings]] = {
    "paths": PathSettings,
    "corpus": CorpusSettings,
    "tokenizer": TokenizerSettings,
    "shards": ShardSettings,
    "model": ModelSettings,
    "objective": ObjectiveSettings,
    "trainer": TrainerSettings,
    "pretrain": InitSettings,
    "finetune": FinetuneSettings,
    "distill": DistillSettings,
    "tracking": TrackingSettings,
    "refresh": RefreshSettings,
}
MISSING = "???"  # Hydra's mark for a key a preset or the user must set


def base_file(group: str) -> Path:
    return CONF_DIR / group / f"{BASE}.yaml"


def default_of(cls: type[BaseModel], name: str) -> Any:
    """A field's default as YAML holds it; a required field is Hydra's `???`."""
    field = cls.model_fields[name]
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return MISSING
    else:
        value = field.default
    return value.model_dump() if isinstance(value, BaseModel) else value


def render(group: str, cls: type[Settings]) -> str:
    """The base file of `group`: a header, then each field's description and default."""
    source = f"{cls.__module__.replace('.', '/')}.py"
    lines = [
        f"# Every `{group}.*` key at its default and what it means: generated from {cls.__name__}",
        f"# ({source}) by `python -m flows.conf_defaults`. Edit the class, not this file.",
        f"# Not a preset itself: presets extend it (defaults: [{BASE}, _self_]) and hold only",
        "# what they change.",
    ]
    for name, field in cls.model_fields.items():
        lines += [f"# {field.description}", f"{name}: {yaml_value(default_of(cls, name))}"]
    return "\n".join(lines) + "\n"


def yaml_value(value: Any) -> str:
    """One value on one line, as YAML reads it back (collections in flow style)."""
    if value == MISSING:
        return MISSING
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1000)
    return text.removesuffix("\n...\n").rstrip("\n")


def stale() -> list[Path]:
    """The base files whose text is not what their class renders."""
    return [
        base_file(group)
        for group, cls in GROUPS.items()
        if not base_file(group).is_file() or base_file(group).read_text() != render(group, cls)
    ]


def main() -> int:
    for group, cls in GROUPS.items():
        path = base_file(group)
        text = render(group, cls)
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
