"""One name and two-way links between Prefect flow runs and MLflow runs (local SQLite store)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from flows.core.config import compose_config
from flows.tracking.links import (
    CUSTOM_MODEL_DEVELOPMENT,
    DESCRIPTION_TAG,
    EXPERIMENT_KIND_TAG,
    FLOW_RUN_ID_TAG,
    FLOW_RUN_URL_TAG,
    ROLE_TAG,
    RunIdentity,
    corpus_label,
    experiment_override,
    mlflow_experiment_url,
    mlflow_run_url,
    prefect_link,
    run_label,
    run_role,
    stage_title,
)
from flows.tracking.runs import Tracker

NOON = datetime(2026, 12, 1, 8, 4, 47, tzinfo=UTC)


def test_a_run_is_named_after_its_second_model_experiment_and_corpus() -> None:
    overrides = ["experiment=smoke", "trainer.max_steps=5"]
    name = run_label(overrides, compose_config(overrides), NOON)
    assert name == "1201-080447-bert-tiny-smoke-pydoc"
    later = NOON.replace(second=48)
    assert run_label(overrides, compose_config(overrides), later) != name
    # two runs in the same minute get two names


def test_several_runs_of_one_experiment_differ_in_what_the_runs_table_shows(
    tmp_path: Path,
) -> None:
    """After four runs every row of MLflow's table read `bert-tiny-smoke-pyd…`: the table shows
    about 17 characters of a top-level name, and the part that differed came last (issue 53,
    case 18). Four runs of one experiment, the same config a minute apart and another model."""
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "smoke", tmp_path / "artifacts")
    smoke = ["experiment=smoke"]
    for minute, overrides in enumerate([smoke, smoke, smoke, [*smoke, "model=bert-mini"]]):
        at = NOON.replace(minute=minute)
        tracker.identity = RunIdentity(run_label(overrides, compose_config(overrides), at))
        tracker.start_run("pipeline").finish()
    client = MlflowClient(tracker.tracking_uri)
    experiment = client.get_experiment_by_name("smoke")
    names = [run.info.run_name for run in client.search_runs([experiment.experiment_id])]
    assert len(names) == 4
    assert len({name[:17] for name in names}) == 4, names  # what MLflow 3.17 shows of each


def test_a_refresh_names_its_domain_and_a_files_corpus_its_folder(tmp_path: Path) -> None:
    overrides = ["corpus=files", f"corpus.paths=[{tmp_path / 'legal'}]"]
    assert run_label(overrides, compose_config(overrides), NOON).endswith("-bert-tiny-legal")
    refresh = [*overrides, "refresh.domain=law"]
    assert run_label(refresh, compose_config(refresh), NOON) == "1201-080447-bert-tiny-law"


@pytest.mark.parametrize(
    ("corpus", "label"),
    [
        ({"kind": "files", "paths": ["/data/pubmed/*.PubTator.txt"]}, "pubmed"),
        ({"kind": "files", "paths": ["/data/wiki/**/wiki_*"]}, "wiki"),
        ({"kind": "files", "paths": ["/data/abstracts.jsonl.gz"]}, "abstracts"),
        ({"kind": "files", "paths": ["/data/wiki/AA/"]}, "AA"),
        ({"kind": "files", "paths": ["*.txt"]}, "files"),
        ({"kind": "huggingface", "name": "wikimedia/wikipedia"}, "wikipedia"),
        ({"kind": "pydoc"}, "pydoc"),
    ],
)
def test_a_corpus_is_named_as_a_person_calls_it(corpus: dict[str, object], label: str) -> None:
    assert corpus_label(corpus) == label


def test_the_last_experiment_override_wins() -> None:
    assert experiment_override(["experiment=bert", "experiment=smoke"]) == "smoke"
    assert experiment_override(["trainer.max_steps=5"]) is None


def test_the_parent_run_takes_the_flow_run_name_and_every_run_links_back_to_prefect(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "links", tmp_path / "artifacts")
    page = "http://127.0.0.1:4200/runs/flow-run/1234"
    tags = {
        FLOW_RUN_ID_TAG: "1234",
        FLOW_RUN_URL_TAG: page,
        DESCRIPTION_TAG: prefect_link("x", page),
    }
    tracker.identity = RunIdentity("smoke-pydoc-20261201-080447", tags)
    parent = tracker.start_run("pipeline")
    child = tracker.start_run("finetune-challenger", parent)
    client = MlflowClient(uri)
    run = client.get_run(child.run_id)
    assert client.get_run(parent.run_id).info.run_name == "smoke-pydoc-20261201-080447"
    assert run.info.run_name == "challenger finetune"  # nested under it: no need to repeat it
    assert run.data.tags[ROLE_TAG] == "finetune-challenger"
    assert {key: run.data.tags[key] for key in tags} == tags
    # The description (markdown in MLflow's UI) is a link back to the Prefect flow run.
    assert run.data.tags[DESCRIPTION_TAG] == f"Prefect flow run [x]({page})"
    assert tracker.run_url(parent.run_id) == (
        f"http://127.0.0.1:5000/#/experiments/{tracker.experiment_id}/runs/{parent.run_id}"
        "?workflowType=machine_learning"
    )


def test_the_experiment_opens_on_its_runs_table(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.create_experiment("older")  # created before Cloze tagged its experiments
    for name in ("older", "fresh"):
        Tracker(uri, name, tmp_path / "artifacts")
        experiment = client.get_experiment_by_name(name)
        assert experiment is not None
        assert experiment.tags[EXPERIMENT_KIND_TAG] == CUSTOM_MODEL_DEVELOPMENT


def test_a_registry_version_carries_its_description_and_the_refresh_decision(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "registry", tmp_path / "artifacts")
    run = tracker.start_run("pretrain")
    run.log_text("weights", "huggingface/model.txt")
    version = tracker.register_model(
        "cloze-law", run, "huggingface", description="Data: law (files)."
    )
    tracker.describe_version(
        "cloze-law",
        version,
        {"cloze.refresh.decision": "promoted", "cloze.refresh.score": 0.75},
        "Refresh: promoted",
    )
    stored = MlflowClient(uri).get_model_version("cloze-law", version)
    assert stored.description == "Data: law (files).\nRefresh: promoted"
    assert stored.tags["cloze.refresh.decision"] == "promoted"
    assert stored.tags["cloze.refresh.score"] == "0.75"


@pytest.mark.parametrize(
    ("tracking_uri", "base"),
    [
        ("sqlite:////tmp/mlflow.db", "http://127.0.0.1:5000"),
        ("http://mlflow:5000/", "http://mlflow:5000"),
    ],
)
def test_the_mlflow_run_page_is_on_the_server_or_the_local_ui(tracking_uri: str, base: str) -> None:
    page = f"{base}/#/experiments/3/runs/abc?workflowType=machine_learning"  # not the GenAI view
    assert mlflow_run_url(tracking_uri, "3", "abc") == page
    table = f"{base}/#/experiments/3/runs?workflowType=machine_learning"  # not its overview
    assert mlflow_experiment_url(tracking_uri, "3") == table


def test_a_bracket_in_a_run_name_does_not_break_the_description_link() -> None:
    assert (
        prefect_link("law-[draft]-1", "http://p/1")
        == r"Prefect flow run [law-\[draft\]-1](http://p/1)"
    )


def test_child_runs_say_what_they_are_within_the_first_characters_the_table_shows(
    tmp_path: Path,
) -> None:
    """MLflow's runs table cuts a name after about 17 characters, fewer nested: a child's name
    starts with what sets it apart from its siblings (the arm, the stage, the task; and the
    seed, for a stage trained with one), not the flow run's name, which its parent carries."""
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "names", tmp_path / "artifacts")
    tracker.identity = RunIdentity("1201-080447-bert-tiny-smoke-pydoc")
    parent = tracker.start_run("pipeline")
    stages = {
        "tokenizer": tracker.start_run("tokenizer", parent),
        "pretrain": tracker.start_run("pretrain", parent, title=stage_title("pretrain", 7)),
        "challenger": tracker.start_run("finetune-challenger", parent),
        "champion": tracker.start_run("finetune-champion", parent),
    }
    tasks = [
        tracker.start_run(f"{stages[arm].stage}/ncbi_disease", stages[arm])
        for arm in ("challenger", "champion")
    ]
    tasks.append(tracker.start_run("lift_curve/ncbi_disease", parent))
    client = MlflowClient(tracker.tracking_uri)
    names = [client.get_run(run.run_id).info.run_name for run in [*stages.values(), *tasks]]
    assert names == [
        "tokenizer",
        "pretrain seed 7",
        "challenger finetune",
        "champion finetune",
        "challenger ncbi_disease",
        "champion ncbi_disease",
        "ncbi_disease",  # under the lift_curve run: its siblings are the curve's other tasks
    ]
    # What the table shows of a name nested one and two levels deep (MLflow 3.17, measured in
    # tests/integration/test_ui_walk.py): the stages differ in it, and so do the arms' tasks.
    assert len({name[:14] for name in names[:4]}) == 4
    assert len({name[:11] for name in names[4:6]}) == 2
    assert client.get_run(parent.run_id).info.run_name == "1201-080447-bert-tiny-smoke-pydoc"
    roles = [run_role(client.get_run(run.run_id).data.tags, "") for run in tasks]
    assert roles == ["ncbi_disease"] * 3  # what tests and compare read: the role, not the name


def test_a_run_of_an_older_store_is_read_by_its_name() -> None:
    assert run_role({}, "smoke-pydoc-20261201-080447/finetune/sst2") == "sst2"
