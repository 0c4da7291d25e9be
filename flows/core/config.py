"""Hydra composition of `conf/` into the plain dict every flow receives.

Composition happens once, at the edge (CLI or deployment), because Hydra's global state is not
thread-safe; everything downstream sees only a resolved, JSON-compatible dict.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from flows.core.paths import REPO_ROOT
from flows.core.settings import ConfigError

OVERRIDES_KEY = "overrides"
CONF_DIR = Path(os.environ.get("CLOZE_CONF_DIR", REPO_ROOT / "conf"))


def compose_config(overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """`conf/` with `overrides` applied, resolved to plain data; `overrides` itself is kept under
    the top-level key `overrides`: a key the user set explicitly can then be told from a preset's
    default (a checkpoint's shape overrules the one, refuses the other: flows/base_checkpoint.py),
    and the run records its own command line."""
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="cloze"):
            composed = compose("config", overrides=list(overrides))
        config = OmegaConf.to_container(composed, resolve=True, throw_on_missing=True)
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(f"invalid config or override: {error}") from error
    assert isinstance(config, dict)
    return {**config, OVERRIDES_KEY: list(overrides)}  # type: ignore[dict-item]


def to_yaml(config: dict[str, Any]) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(config))


def expand_sweeps(overrides: list[str]) -> list[list[str]]:
    """Hydra's multirun semantics: `key=a,b` sweeps; the runs are the product, in order."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as error:
        raise ConfigError(f"invalid override: {error}") from error
    choices = [
        [f"{override.get_key_element()}={value}" for value in override.sweep_string_iterator()]
        if override.is_sweep_override()
        else [override.input_line or ""]
        for override in parsed
    ]
    return [list(run) for run in itertools.product(*choices)]
