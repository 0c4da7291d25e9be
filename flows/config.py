"""Hydra composition of `conf/` into the plain dict every flow receives.

Composition happens once, at the edge (CLI or deployment), because Hydra's global state is not
thread-safe; everything downstream sees only a resolved, JSON-compatible dict.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from flows.settings import ConfigError

CONF_DIR = Path(os.environ.get("CLOZE_CONF_DIR", Path(__file__).resolve().parents[1] / "conf"))


def compose_config(overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="cloze"):
            composed = compose("config", overrides=list(overrides))
        config = OmegaConf.to_container(composed, resolve=True, throw_on_missing=True)
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(f"invalid config or override: {error}") from error
    assert isinstance(config, dict)
    return config  # type: ignore[return-value]


def to_yaml(config: dict[str, Any]) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(config))
