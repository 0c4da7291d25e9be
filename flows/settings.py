"""Turns a config section (a plain dict) into a typed settings dataclass with precise errors.

Hydra's struct mode already rejects unknown keys given as overrides; this catches the same mistakes
in hand-built dicts (Prefect UI parameters, tests) and names the full config key in every message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

SettingsT = TypeVar("SettingsT")


class ConfigError(ValueError):
    """A config key is unknown, missing or has an unusable value; the message names the key."""


def settings_from(cls: type[SettingsT], section: Mapping[str, Any], prefix: str) -> SettingsT:
    fields = {field.name: field for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(section) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown config key {prefix}.{unknown[0]}; valid keys under {prefix}: "
            f"{', '.join(sorted(fields))}"
        )
    missing = [
        name
        for name, field in fields.items()
        if name not in section
        and field.default is dataclasses.MISSING
        and field.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"missing config key {prefix}.{missing[0]}")
    try:
        return cls(**dict(section))
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{prefix}: {error}") from error


def output_settings(settings: Any, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields that change a stage's output, for its content key."""
    return {k: v for k, v in dataclasses.asdict(settings).items() if k not in exclude}
