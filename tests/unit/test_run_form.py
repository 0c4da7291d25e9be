"""The deployment's run form: typed, described fields that compose like the command line."""

from __future__ import annotations

from pathlib import Path

from prefect.utilities.callables import parameter_schema

from flows.core.config import CONF_DIR, compose_config
from flows.deploy.entrypoints import pipeline_deployment
from flows.deploy.form import RunForm
from flows.pipeline import STAGES
from flows.refresh.flow import domain_refresh


def schema(flow_object: object) -> dict:
    return parameter_schema(flow_object.fn).model_dump()  # type: ignore[attr-defined]


def test_choices_are_the_files_of_conf_and_the_stages() -> None:
    definitions = schema(pipeline_deployment)["definitions"]
    experiments = sorted(path.stem for path in (CONF_DIR / "experiment").glob("*.yaml"))
    assert definitions["Experiment"]["enum"] == experiments
    assert definitions["Stage"]["enum"] == list(STAGES)
    assert "bert-mini" in definitions["Model"]["enum"]
    assert "sst2" in definitions["Task"]["enum"] and "base" not in definitions["Task"]["enum"]


def test_every_field_of_both_forms_has_a_description() -> None:
    for flow_object in (pipeline_deployment, domain_refresh):
        properties = schema(flow_object)["properties"]
        assert set(properties) <= set(RunForm.model_fields)
        assert all(field.get("description") for field in properties.values()), properties
    assert list(schema(domain_refresh)["properties"]) == ["experiment", "overrides"]


def test_the_form_composes_what_the_command_line_would(tmp_path: Path) -> None:
    form = RunForm(
        experiment="smoke",
        model="bert-mini",
        corpus_paths=[str(tmp_path / "a b.txt")],
        max_steps=7,
        tasks=["sst2", "cola"],
        overrides=["trainer.max_steps=9", f"paths.root={tmp_path}"],
    )
    config = compose_config(form.to_overrides())
    assert config["model"]["name"] == "bert-mini"
    assert config["corpus"]["paths"] == [str(tmp_path / "a b.txt")]  # a space survives
    assert config["finetune"]["tasks"] == ["sst2", "cola"]
    assert config["trainer"]["max_steps"] == 9  # raw overrides come last and win
    assert config["shards"]["seq_len"] == 64  # the smoke bundle
