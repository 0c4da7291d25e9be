"""Deploy config validation, and deployment parameters composing exactly like the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.core.config import CONF_DIR, compose_config
from flows.core.settings import ConfigError
from flows.deploy.cli import deployment_options
from flows.deploy.form import RunForm
from flows.deploy.settings import DEPLOYMENTS, DeploymentSettings, DeploySettings


def test_the_shipped_deploy_config_is_valid_and_lists_every_deployment() -> None:
    settings = DeploySettings.load(CONF_DIR / "deploy" / "default.yaml")
    assert list(settings.enabled()) == list(DEPLOYMENTS)
    assert settings.training_concurrency == 1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"deployments": {"nightly": {}}}, "unknown deployment deployments.nightly"),
        ({"deployments": {"full": {"cron": "0 25 * * *"}}}, r"deployments.full.cron='0 25"),
        ({"deployments": {"full": {"timezone": "Mars/Base"}}}, "not an IANA time zone"),
        ({"deployments": {"full": {"schedule": "x"}}}, "unknown config key deployments.full"),
        ({"deployments": {"full": {"timeout_hours": 0}}}, "timeout_hours=0 must be greater than 0"),
        ({"deployments": {"full": {"overrides": "a=b"}}}, "deployments.full.overrides="),
        ({"training_concurrency": 0}, "deploy.training_concurrency=0 must be at least 1"),
    ],
)
def test_invalid_deploy_settings_name_the_key(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DeploySettings.from_dict(raw)


def test_a_cron_schedule_keeps_its_time_zone_and_stage_deployments_stop_early() -> None:
    item = DeploymentSettings(overrides=["a=b"], cron="0 2 * * *", timezone="Europe/Berlin")
    options = deployment_options("pretrain", item)
    assert options["parameters"] == {"overrides": ["a=b"], "until": "pretrain"}
    [schedule] = options["schedules"]
    assert (schedule.cron, schedule.timezone) == ("0 2 * * *", "Europe/Berlin")
    refresh = deployment_options("domain-refresh", DeploymentSettings())
    assert refresh["parameters"] == {"overrides": []} and refresh["schedules"] is None


def test_deployment_parameters_compose_exactly_like_the_command_line(tmp_path: Path) -> None:
    overrides = [f"paths.root={tmp_path}", "trainer.max_steps=7", "model=bert-mini"]
    from_deployment = compose_config(
        RunForm(experiment="smoke", overrides=overrides).to_overrides()
    )
    from_cli = compose_config(["experiment=smoke", *overrides])  # python -m flows experiment=...
    assert from_deployment == from_cli
    assert from_deployment["trainer"]["max_steps"] == 7  # the run's override beats the bundle
    assert from_deployment["shards"]["seq_len"] == 64  # the smoke bundle applied
    assert compose_config(RunForm().to_overrides()) == compose_config([])


def test_io_stages_retry_and_training_stages_never_do_but_share_the_limited_tag() -> None:
    from flows.pipeline import (
        TRAINING_TAG,
        finetune_task,
        pretrain_task,
        shards_task,
        tokenizer_task,
    )

    for io_task in (tokenizer_task, shards_task):
        assert io_task.retries == 2 and "cloze-io" in io_task.tags
    for training_task in (pretrain_task, finetune_task):
        assert not training_task.retries and TRAINING_TAG in training_task.tags
