"""Turns a config section (a plain dict) into a typed settings dataclass with precise errors.

Hydra's struct mode already rejects unknown keys given as overrides; this catches the same mistakes
in hand-built dicts (Prefect UI parameters, tests) and names the full config key in every message.
"""

from __future__ import annotations

import dataclasses
import types
import typing
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
    hints = typing.get_type_hints(cls)
    for name, value in section.items():
        expected = hints.get(name)
        if expected is not None and not value_fits(value, expected):
            raise ConfigError(f"{prefix}.{name}={value!r} must be {describe_type(expected)}")
    try:
        return cls(**dict(section))
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{prefix}: {error}") from error


def value_fits(value: Any, expected: Any) -> bool:
    """Whether a config value has the field's type; ints pass as floats, bools never as ints."""
    options = typing.get_args(expected) if is_union(expected) else (expected,)
    for option in options:
        if option is type(None) and value is None:
            return True
        if option is bool and isinstance(value, bool):
            return True
        if option is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if option is float and isinstance(value, int | float) and not isinstance(value, bool):
            return True
        if option is str and isinstance(value, str):
            return True
        origin = typing.get_origin(option) or option
        if origin is typing.Literal and value in typing.get_args(option):
            return True
        if origin in (dict, list, tuple) and isinstance(value, origin):
            return True
        if option is Any:
            return True
    return False


def is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def describe_type(expected: Any) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    options = typing.get_args(expected) if is_union(expected) else (expected,)
    described = [
        "null"
        if option is type(None)
        else f"one of {typing.get_args(option)}"
        if typing.get_origin(option) is typing.Literal
        else names.get(option, getattr(option, "__name__", "?"))
        for option in options
    ]
    return " or ".join(described)


def output_settings(settings: Any, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields that change a stage's output, for its content key."""
    return {k: v for k, v in dataclasses.asdict(settings).items() if k not in exclude}
