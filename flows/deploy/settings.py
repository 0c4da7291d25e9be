"""`conf/deploy/<name>.yaml`: which deployments exist, their default overrides and schedules.

Kept apart from the Hydra run config on purpose: it describes how runs are triggered, not what a
run computes, so it must not enter any run's params or artifact keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import Field

from flows.core.settings import ConfigError, Number, Settings, bounds, settings_from

# Deployment name -> the pipeline stage it stops after (None: a flow of its own, the domain
# refresh's or `cloze evaluate`'s: flows/deploy/cli.py ENTRYPOINTS).
DEPLOYMENTS: dict[str, str | None] = {
    "full": "finetune",
    "tokenizer": "tokenizer",
    "shards": "shards",
    "pretrain": "pretrain",
    "finetune": "finetune",
    # Distillation from a registry alias (conf/deploy/default.yaml), then its three-arm finetune.
    "distill": "finetune",
    "domain-refresh": None,
    # A checkpoint as it is on the tasks (`cloze evaluate`): no corpus, no pretraining.
    "evaluate": None,
}


class DeploymentSettings(Settings):
    """`deployments.<name>.*` of the deploy config."""

    enabled: bool = True
    overrides: list[str] = Field(default_factory=list)
    cron: str | None = None
    timezone: str = "UTC"
    timeout_hours: Annotated[Number, bounds(gt=0)] | None = None

    def check(self, prefix: str) -> None:
        """What types cannot say: a known time zone and a cron expression Prefect accepts."""
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError) as error:
            raise ConfigError(
                f"{prefix}.timezone={self.timezone!r} is not an IANA time zone (e.g. UTC, "
                "Europe/Berlin)"
            ) from error
        if self.cron is not None:
            from prefect.client.schemas.schedules import CronSchedule
            from pydantic import ValidationError

            try:
                CronSchedule(cron=self.cron, timezone=self.timezone)
            except ValidationError as error:
                raise ConfigError(
                    f"{prefix}.cron={self.cron!r} is not a valid cron expression (five fields: "
                    "minute hour day-of-month month day-of-week, e.g. '0 2 * * *')"
                ) from error


class DeploySettings(Settings):
    section = "deploy"

    training_concurrency: Annotated[int, bounds(ge=1)] | None = 1
    deployments: dict[str, DeploymentSettings] = Field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> DeploySettings:
        raw = dict(raw)
        sections = raw.pop("deployments", None) or {}
        if not isinstance(sections, dict):
            raise ConfigError("deployments must map deployment names to their settings")
        unknown = sorted(set(sections) - set(DEPLOYMENTS))
        if unknown:
            raise ConfigError(
                f"unknown deployment deployments.{unknown[0]}; valid names: "
                f"{', '.join(DEPLOYMENTS)}"
            )
        deployments = {}
        for name in DEPLOYMENTS:
            prefix = f"deployments.{name}"
            settings = settings_from(DeploymentSettings, sections.get(name) or {}, prefix)
            settings.check(prefix)
            deployments[name] = settings
        top = settings_from(cls, raw, "deploy")
        return top.model_copy(update={"deployments": deployments})

    @classmethod
    def load(cls, path: Path) -> DeploySettings:
        if not path.is_file():
            raise ConfigError(f"deploy config {path} does not exist")
        raw = yaml.safe_load(path.read_text()) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{path} must be a mapping of deploy settings")
        return cls.from_dict(raw)

    def enabled(self) -> dict[str, DeploymentSettings]:
        return {name: item for name, item in self.deployments.items() if item.enabled}
