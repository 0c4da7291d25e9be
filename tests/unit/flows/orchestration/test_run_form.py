"""The deployment's run form: typed, described fields that compose like the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect.utilities.callables import parameter_schema

from flows.core.config import CONF_DIR, compose_config
from flows.core.settings import ConfigError
from flows.deploy.entrypoints import pipeline_deployment
from flows.orchestration.run_form import DEFAULT_MODEL, DEFAULT_STEPS, DEFAULT_TASKS, RunForm
from flows.pipeline import STAGES
from flows.refresh.flow import domain_refresh
from flows.resolve import resolve_run


def schema(flow_object: object) -> dict:
    return parameter_schema(flow_object.fn).model_dump()  # type: ignore[attr-defined]


def test_choices_are_the_files_of_conf_and_the_stages() -> None:
    definitions = schema(pipeline_deployment)["definitions"]
    experiments = sorted(path.stem for path in (CONF_DIR / "experiment").glob("*.yaml"))
    assert definitions["Experiment"]["enum"] == ["none", *experiments]
    assert definitions["Stage"]["enum"] == list(STAGES)
    assert "bert-mini" in definitions["Model"]["enum"]
    assert definitions["Objective"]["enum"] == ["electra", "mlm", "span", "wwm"]
    tasks = definitions["Task"]["enum"]
    assert "sst2" in tasks and "base" not in tasks and "catalog" not in tasks
    assert "base" not in definitions["Model"]["enum"]


def test_every_field_of_both_forms_has_a_description_the_ui_can_render() -> None:
    for flow_object in (pipeline_deployment, domain_refresh):
        properties = schema(flow_object)["properties"]
        assert set(properties) <= set(RunForm.model_fields)
        for name, field in properties.items():
            # The UI renders a description as HTML: `model=<name>` showed as "(model=)".
            assert field.get("description") and "<" not in field["description"], name
    assert list(schema(domain_refresh)["properties"]) == ["experiment", "overrides"]


def test_every_field_starts_on_the_value_a_run_gets_not_on_none() -> None:
    properties = schema(pipeline_deployment)["properties"]
    defaults = {name: field["default"] for name, field in properties.items()}
    assert defaults == {
        "experiment": "none",
        "until": "finetune",
        "model": "bert-tiny",
        "objective": "mlm",
        "corpus_paths": [],
        "init_from": "",
        "max_steps": 2000,
        "tasks": ["pydoc_topics"],
        "overrides": [],
    }
    # No field may offer None: the UI showed 'Property is type "None"' for it.
    assert all("anyOf" not in field for field in properties.values()), properties
    configured = compose_config([])
    assert configured["trainer"]["max_steps"] == DEFAULT_STEPS
    assert configured["finetune"]["tasks"] == DEFAULT_TASKS
    assert configured["model"]["name"] == DEFAULT_MODEL


def test_the_form_composes_what_the_command_line_would(tmp_path: Path) -> None:
    form = RunForm(
        experiment="smoke",
        model="bert-mini",
        objective="wwm",
        corpus_paths=[str(tmp_path / "a b.txt")],
        max_steps=7,
        tasks=["sst2", "cola"],
        overrides=["trainer.max_steps=9", f"paths.root={tmp_path}"],
    )
    config = compose_config(form.to_overrides())
    assert config["model"]["name"] == "bert-mini"
    assert config["objective"]["name"] == "wwm"
    assert config["corpus"]["paths"] == [str(tmp_path / "a b.txt")]  # a space survives
    assert config["finetune"]["tasks"] == ["sst2", "cola"]
    assert config["trainer"]["max_steps"] == 9  # raw overrides come last and win
    assert config["shards"]["seq_len"] == 64  # the smoke bundle


def test_fields_left_at_their_defaults_keep_the_experiment_s_own_values() -> None:
    form = RunForm(
        experiment="smoke", model=DEFAULT_MODEL, objective="mlm", max_steps=DEFAULT_STEPS
    )
    assert form.to_overrides() == ["experiment=smoke"]
    assert compose_config(form.to_overrides())["trainer"]["max_steps"] == 60  # smoke's
    assert RunForm(experiment="none", tasks=list(DEFAULT_TASKS)).to_overrides() == []


def test_until_distill_without_a_distill_config_is_refused_before_any_stage() -> None:
    with pytest.raises(ConfigError, match=r"^until=distill: this config has no distill stage; add"):
        resolve_run(["experiment=smoke"], "distill")


def test_a_checkpoint_on_the_form_is_pretrain_init_from() -> None:
    """The form's `init_from` is the CLI's `pretrain.init_from`; empty adds nothing."""
    form = RunForm(init_from="/models/bert-base-uncased")
    assert form.to_overrides() == ["pretrain.init_from=/models/bert-base-uncased"]
    assert RunForm(init_from="").to_overrides() == []
    config = compose_config(form.to_overrides())
    assert config["pretrain"]["init_from"] == "/models/bert-base-uncased"
