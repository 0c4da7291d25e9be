"""Deploy config validation, and deployment parameters composing exactly like the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.core.config import CONF_DIR, compose_config
from flows.core.settings import ConfigError
from flows.deploy.cli import (
    check_overrides,
    check_server,
    config_path,
    deployment_options,
    entrypoint_of,
    flow_of,
)
from flows.deploy.settings import DEPLOYMENTS, DeploymentSettings, DeploySettings
from flows.orchestration.run_form import RunForm


def test_the_shipped_deploy_config_is_valid_and_lists_every_deployment() -> None:
    settings = DeploySettings.load(CONF_DIR / "deploy" / "default.yaml")
    assert list(settings.enabled()) == list(DEPLOYMENTS)
    assert settings.training_concurrency == 1
    check_overrides(settings)  # every default composes into a valid config


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


def test_the_evaluate_deployment_runs_cloze_evaluate_s_own_flow_with_no_stage_parameter() -> None:
    options = deployment_options("evaluate", DeploymentSettings())
    assert options["parameters"] == {"overrides": []}
    assert options["description"] == (
        "Cloze evaluate: a typed run form (init_from, tasks) plus raw Hydra overrides"
    )
    assert entrypoint_of("evaluate") == "flows/evaluate/flow.py:evaluate_deployment"
    assert flow_of("evaluate").name == "cloze-evaluate"  # the CLI's flow name: one flow page


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


def test_the_documented_refresh_overrides_survive_prefect_s_markup_printing() -> None:
    from rich.markup import render

    documented = ["corpus=files", "corpus.paths=[/data/legal]", "refresh.domain=legal"]
    item = DeploymentSettings(overrides=[*documented, "finetune.tasks=[sst2]"])
    parameters = deployment_options("domain-refresh", item)["parameters"]
    # `prefect deployment run` prints the parameters as rich markup: as written, `[/data/legal]`
    # was a closing tag (MarkupError) and `[sst2]` vanished.
    assert render(str(parameters)).plain == str(parameters)
    quoted, as_written = compose_config(parameters["overrides"]), compose_config(item.overrides)
    # The same run: only the record of how the overrides were spelled differs.
    assert quoted.pop("overrides") != as_written.pop("overrides") and quoted == as_written


def test_a_typo_in_a_deployment_s_default_overrides_is_named_before_registering() -> None:
    settings = DeploySettings.from_dict(
        {"deployments": {"full": {"overrides": ["trainer.max_stepz=5"]}}}
    )
    with pytest.raises(
        ConfigError,
        match=r"^deployments\.full\.overrides: unknown config key trainer\.max_stepz; nearest",
    ):
        check_overrides(settings)


def test_deploy_without_a_reachable_server_says_so_in_one_line(tmp_path: Path) -> None:
    from tests.integration.servers import free_port

    api = f"http://127.0.0.1:{free_port()}/api"  # nothing listens there
    for command in (["serve"], ["register", "--pool", "p"]):
        result = subprocess.run(
            [sys.executable, "-m", "flows.deploy", *command],
            env={**os.environ, "PREFECT_API_URL": api},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2
        assert result.stderr.startswith(
            f"error: no Prefect server answers at PREFECT_API_URL={api} "
        ), result.stderr
        assert result.stderr.count("\n") == 1 and "prefect server start" in result.stderr


def test_a_deploy_config_is_a_name_under_conf_or_a_yaml_path(tmp_path: Path) -> None:
    assert config_path("default") == CONF_DIR / "deploy" / "default.yaml"
    assert config_path(str(tmp_path / "team.yaml")) == tmp_path / "team.yaml"


@pytest.mark.parametrize(("status", "refused"), [(404, True), (401, False), (200, False)])
def test_a_server_that_is_not_a_prefect_api_is_named_and_one_asking_for_credentials_passes(
    status: int, refused: bool
) -> None:
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api = f"http://127.0.0.1:{server.server_port}/api"
    try:
        if refused:
            with pytest.raises(ConfigError, match=rf"^PREFECT_API_URL={api} is not a Prefect"):
                check_server(api)
        else:
            check_server(api)
    finally:
        server.shutdown()
