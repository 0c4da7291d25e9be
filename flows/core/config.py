"""Hydra composition of `conf/` into the plain dict every flow receives.

Composition happens once, at the edge (CLI or deployment), because Hydra's global state is not
thread-safe; everything downstream sees only a resolved, JSON-compatible dict.
"""

from __future__ import annotations

import copy
import difflib
import functools
import itertools
import os
import re
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from flows.core.paths import REPO_ROOT
from flows.core.settings import ConfigError

OVERRIDES_KEY = "overrides"
CONF_DIR = Path(os.environ.get("CLOZE_CONF_DIR", REPO_ROOT / "conf"))
# Each group's `base.yaml`: every key at its default, generated from the group's settings class
# (flows/conf_defaults.py); the group's presets extend it.
BASE = "base"


# Hydra's words for an override of a key the composed config does not have.
UNKNOWN_KEY = re.compile(r"Could not override '(?P<key>[^']+)'")
MISSING_OPTION = re.compile(r"Could not find '(?P<group>[^'/]+)/(?P<option>[^']+)'")
MISSING = object()  # a key a preset's file does not hold (None is a value it may hold)


def compose_config(overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """`conf/` composed with `overrides`, resolved to a plain dict; `overrides` itself is kept
    under the top-level key `overrides` (as given, before any `+` is added): a key the user set
    explicitly can then be told from a preset's default (a checkpoint's shape overrules the one
    and refuses the other: flows/stages/init_point.py), and the run records its own command line.

    A key the composed config lacks is added, as Hydra's `+key=value` would: whether a key is
    valid is for the settings classes to say (flows/core/settings.py), which know every key,
    name the nearest ones to a typo, and refuse the rest. Hydra's own refusal advises `+key`,
    which is wrong for a typo and needless for a valid key a preset leaves unset (a task's
    `recipe.seeds`). A key that only another option of its group has names that option.
    """
    items = list(overrides)
    for _ in range(len(items) + 1):
        try:
            return {**composed_config(items), OVERRIDES_KEY: list(overrides)}
        except (HydraException, OmegaConfBaseException) as error:
            added = with_unknown_key_added(error, items)
            if added is None:
                raise ConfigError(explain(error)) from error
            items = added
    raise AssertionError("unreachable: each retry adds one more override's key")


def composed_config(overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """A fresh copy each call: a caller may change what it gets."""
    environment = tuple(sorted(os.environ.items()))  # what `oc.env` interpolations read
    return copy.deepcopy(composed_once(tuple(overrides), environment))


@functools.lru_cache(maxsize=16)
def composed_once(overrides: tuple[str, ...], environment: tuple[tuple[str, str], ...]) -> Any:
    """Hydra's composition, done once per overrides and environment in a process: a served run
    composes the same overrides to name itself and again to run (0.3 to 0.5 s each), and the
    files under conf/ do not change while a process runs."""
    del environment  # part of the cache key only
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="cloze"):
        composed = compose("config", overrides=list(overrides))
    config = OmegaConf.to_container(composed, resolve=True, throw_on_missing=True)
    assert isinstance(config, dict)
    return config


def with_unknown_key_added(error: Exception, overrides: list[str]) -> list[str] | None:
    """`overrides` with the key Hydra refused to override added (`+key=value`), or None when
    the error is another one."""
    match = UNKNOWN_KEY.search(str(error))
    if match is None:
        return None
    key = match.group("key")
    parts = key.split(".")
    owners = options_with_key(parts[0], parts[1:]) if len(parts) > 1 else []
    if owners:
        raise ConfigError(
            f"unknown config key {key}: it belongs to {' and '.join(owners)}, not to the "
            f"{parts[0]} this config selects; select one first (e.g. {owners[0]})"
        ) from error
    plain = [index for index, item in enumerate(overrides) if item.split("=", 1)[0] == key]
    if not plain:
        return None
    return [f"+{item}" if index == plain[0] else item for index, item in enumerate(overrides)]


def explain(error: Exception) -> str:
    """One line for a composition error; a missing preset gets the nearest ones."""
    if isinstance(error, OverrideParseException):
        return unparsed_override(error)
    text = str(error)
    option = MISSING_OPTION.search(text) if isinstance(error, MissingConfigException) else None
    if option is not None:
        return unknown_option(option.group("group"), option.group("option"))
    lines = text.split("Config search path:")[0].split("\n")
    return "invalid config or override: " + " ".join(line.strip() for line in lines if line)


def unparsed_override(error: OverrideParseException) -> str:
    """An override Hydra's grammar refuses, named whole with its key, Hydra's reason (where a
    lexer error points with a caret: the character) and how to quote a value for Hydra: the
    shell's quotes alone leave spaces, brackets and non-ASCII characters to Hydra's parser."""
    override = error.override or ""
    key, _, value = override.partition("=")
    lines = [line for line in str(error).splitlines() if not line.startswith("See https://")]
    if lines and lines[0].startswith("LexerNoViableAltException: ") and len(lines) > 1:
        column = len(lines[1]) - len(lines[1].lstrip()) - len("LexerNoViableAltException: ")
        bad = override[column] if 0 <= column < len(override) else ""
        reason = f"a character Hydra's grammar does not take unquoted ({bad!r}, column {column})"
    else:
        reason = " ".join(line.strip() for line in lines) or type(error).__name__
    quoted = f'"{value}"' if not {'"', "'"} & set(value) else '"a b"'  # else the shell's break
    return (
        f"cannot parse the override {override!r} (key {key.lstrip('+~')}): {reason}. A value "
        "holding spaces, brackets, commas, quotes or non-ASCII characters needs Hydra's own "
        f"quotes inside the shell's: '{key}={quoted}'"
    )


def options_with_key(group: str, path: list[str]) -> list[str]:
    """`distill=default` for `distill.teacher`: the presets of a group that set the key, in their
    own file or in the group's generated base file they extend."""
    folder = CONF_DIR / group
    files = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
    base = next((file for file in files if file.stem == BASE), None)
    in_base = base is not None and holds(yaml.safe_load(base.read_text()) or {}, path)
    owners = []
    for option in files:
        if option.stem == BASE:
            continue
        node: Any = yaml.safe_load(option.read_text()) or {}
        if holds(node, path) or (in_base and BASE in (node.get("defaults") or [])):
            owners.append(f"{group}={option.stem}")
    return owners


def holds(node: Any, path: list[str]) -> bool:
    for part in path:
        node = node.get(part, MISSING) if isinstance(node, dict) else MISSING
    return node is not MISSING


def unknown_option(group: str, option: str) -> str:
    """`model=bert-mimi`: the presets of the group spelled like it, else all of them."""
    names = sorted(path.stem for path in (CONF_DIR / group).glob("*.yaml"))
    nearest = difflib.get_close_matches(option, names, n=3, cutoff=0.6)
    if nearest:
        return f"{group}={option} is not in conf/{group}/; nearest: {', '.join(nearest)}"
    return f"{group}={option} is not in conf/{group}/; options: {', '.join(names)}"


def to_yaml(config: dict[str, Any]) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(config))


def expand_sweeps(overrides: list[str]) -> list[list[str]]:
    """Hydra's multirun semantics: `key=a,b` sweeps; the runs are the product, in order."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as error:
        raise ConfigError(unparsed_override(error)) from error
    except HydraException as error:
        raise ConfigError(f"invalid override: {error}") from error
    choices = [
        [f"{override.get_key_element()}={value}" for value in override.sweep_string_iterator()]
        if override.is_sweep_override()
        else [override.input_line or ""]
        for override in parsed
    ]
    return [list(run) for run in itertools.product(*choices)]
