"""Slow: `python -m flows.deploy serve` against real Prefect and MLflow servers on 127.0.0.1.

Runs are triggered through the Prefect API with overrides, as a user would from the UI or
`prefect deployment run`; what they did is read back from the MLflow server and the artifact
store. One Prefect server, one MLflow server and one serve process are shared by the module.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from mlflow.tracking import MlflowClient
from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.objects import FlowRun

from flows.tracking.links import run_role
from tests.fakes import SERVED_RUN
from tests.guides import guide_quotes
from tests.integration.servers import mlflow_server, prefect_server, serving_deployments

pytestmark = pytest.mark.slow
DEPLOYMENTS = ["cloze-pipeline/full", "cloze-pipeline/pretrain", "domain-refresh/domain-refresh"]
STAGE_TASKS = ("tokenizer", "shards", "pretrain", "finetune")
# Prefect's task runs, named as their MLflow runs are: pretrain with its seed (conf's 1234).
TASK_RUNS = ("tokenizer", "shards", "pretrain seed 1234", "finetune")


@dataclass(frozen=True)
class Services:
    prefect_api: str
    mlflow_uri: str
    root: Path
    serve_log: Path


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    base = tmp_path_factory.mktemp("deployments")
    (base / "mlflow").mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_HOME"}
    with (
        prefect_server(base / "prefect", services=True) as api,  # task runs in the graph
        mlflow_server(base / "mlflow") as uri,
    ):
        config = deploy_config(base, uri)
        with serving_deployments(api, base / "serve.log", env, DEPLOYMENTS, config=str(config)):
            yield Services(api, uri, base / "run", base / "serve.log")


def deploy_config(base: Path, mlflow_uri: str) -> Path:
    """conf/deploy/default.yaml with the domain refresh configured as the guide shows
    (`"corpus.paths=[/data/legal]"`), on a tiny budget and the test's servers."""
    legal = base / "legal"
    legal.mkdir()
    write_part(legal, 7)
    settings = [
        "experiment=smoke",
        f"paths.root={base / 'run'}",
        f"tracking.uri={mlflow_uri}",
        "tracking.experiment=legal",
        *SERVED_RUN,
    ]
    refresh = ["corpus=files", f"corpus.paths=[{legal}]", "refresh.domain=legal", *settings]
    path = base / "deploy.yaml"
    path.write_text(json.dumps({"deployments": {"domain-refresh": {"overrides": refresh}}}))
    return path


def run_deployment(
    services: Services, name: str, parameters: dict[str, Any], state: str = "Completed"
) -> FlowRun:
    """Creates a flow run as the UI does and waits for it to end in `state`."""
    with SyncPrefectClient(services.prefect_api) as client:
        deployment = client.read_deployment_by_name(name)
        flow_run = client.create_flow_run_from_deployment(deployment.id, parameters=parameters)
    return wait_for(services, flow_run.id, state)


def run_from_shell(services: Services, name: str, experiment: str, overrides: list[str]) -> FlowRun:
    """`prefect deployment run NAME --param experiment=... --param overrides='[...]'`."""
    env = {**os.environ, "PREFECT_API_URL": services.prefect_api}
    env.pop("PREFECT_HOME", None)
    command = [sys.executable, "-m", "prefect", "deployment", "run", name]
    command += [
        "--param",
        f"experiment={experiment}",
        "--param",
        f"overrides={json.dumps(overrides)}",
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    match = re.search(r"UUID: ([0-9a-f-]{36})", result.stdout)
    assert match, result.stdout
    return wait_for(services, UUID(match.group(1)))


def wait_for(services: Services, flow_run_id: UUID, state: str = "Completed") -> FlowRun:
    with SyncPrefectClient(services.prefect_api) as client:
        deadline = time.monotonic() + 400
        while True:
            flow_run = client.read_flow_run(flow_run_id)
            if flow_run.state is not None and flow_run.state.is_final():
                break
            assert time.monotonic() < deadline, f"{flow_run.name} still {flow_run.state}"
            time.sleep(1)
    assert flow_run.state is not None
    assert flow_run.state.name == state, (
        f"{flow_run.name}: {flow_run.state}\n{services.serve_log.read_text()[-4000:]}"
    )
    return flow_run


def run_logs(services: Services, flow_run_ids: list[UUID], last: str) -> list[Any]:
    """The runs' logs once a line starting with `last` is among them: a run's process sends
    its last lines as it exits, after the run's final state is recorded."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    page = 200  # the server's most per request
    with SyncPrefectClient(services.prefect_api) as prefect:
        deadline = time.monotonic() + 180  # a loaded machine delays the log worker's batches
        while True:
            logs: list[Any] = []
            while len(logs) % page == 0:
                batch = prefect.read_logs(
                    LogFilter(flow_run_id=LogFilterFlowRunId(any_=flow_run_ids)),
                    limit=page,
                    offset=len(logs),
                )
                logs += batch
                if not batch:
                    break
            if any(log.message.startswith(last) for log in logs) or time.monotonic() > deadline:
                return logs
            time.sleep(1)


def common(services: Services, experiment: str) -> list[str]:
    return [
        f"paths.root={services.root}",
        f"tracking.uri={services.mlflow_uri}",
        f"tracking.experiment={experiment}",
        *SERVED_RUN,
    ]


def test_a_cli_run_and_a_deployment_run_are_filed_under_one_flow(services: Services) -> None:
    """One job, one flow: the flow's page in the Prefect UI holds the runs of `python -m flows`
    and of the `cloze-pipeline/*` deployments; the refresh stays a flow of its own."""
    overrides = ["experiment=smoke", *common(services, "one-flow")]
    env = {**os.environ, "PREFECT_API_URL": services.prefect_api}
    env.pop("PREFECT_HOME", None)
    cli = subprocess.run(
        [sys.executable, "-m", "flows", *overrides],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert cli.returncode == 0, cli.stdout[-3000:] + cli.stderr[-3000:]
    deployed = run_deployment(
        services, "cloze-pipeline/pretrain", {"experiment": "smoke", "overrides": overrides[1:]}
    )
    with SyncPrefectClient(services.prefect_api) as client:
        flows = {flow.id: flow.name for flow in client.read_flows()}
        runs = client.read_flow_runs()
    assert set(flows.values()) == {"cloze-pipeline", "domain-refresh", "cloze-evaluate"}
    from_cli = [run for run in runs if run.deployment_id is None]
    assert from_cli and {flows[run.flow_id] for run in from_cli} == {"cloze-pipeline"}
    assert flows[deployed.flow_id] == "cloze-pipeline"


def test_a_stage_deployment_runs_with_the_overrides_it_was_given(services: Services) -> None:
    corpus = services.root.parent / "texts"
    corpus.mkdir()
    write_part(corpus, 5)
    # Quoted: the Prefect CLI prints parameters as rich markup, where `[/...]` is a closing tag.
    overrides = [*common(services, "deployed"), "corpus=files", f"corpus.paths=['{corpus}']"]
    flow_run = run_from_shell(services, "cloze-pipeline/shards", "smoke", overrides)
    assert re.fullmatch(r"\d{4}-\d{6}-bert-tiny-smoke-texts", flow_run.name)  # time, model, ...
    client = MlflowClient(services.mlflow_uri)
    experiment = client.get_experiment_by_name("deployed")
    runs = client.search_runs([experiment.experiment_id])
    # The stage deployment stops after shards; the tokenizer it needs ran in the same run.
    assert sorted(run_role(run.data.tags, run.info.run_name) for run in runs) == [
        "pipeline",
        "shards",
        "tokenizer",
    ]
    parent = next(run for run in runs if run_role(run.data.tags, run.info.run_name) == "pipeline")
    assert parent.data.params["trainer.max_steps"] == "12"  # the override
    assert parent.data.params["shards.seq_len"] == "64"  # the smoke bundle
    with SyncPrefectClient(services.prefect_api) as prefect:
        limit = prefect.read_concurrency_limit_by_tag("cloze-training")  # set by `serve`
        [summary] = [item for item in prefect.read_artifacts() if item.flow_run_id == flow_run.id]
    assert limit.concurrency_limit == 1
    assert summary.key == "cloze-shards-summary" and "| shards | computed |" in summary.data


def test_a_served_run_shows_its_stages_and_progress_and_links_both_ways(
    services: Services,
) -> None:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    corpus = services.root.parent / "manuals"
    corpus.mkdir()
    write_part(corpus, 3)
    overrides = [*common(services, "linked"), "corpus=files", f"corpus.paths=['{corpus}']"]
    parameters = {"experiment": "smoke", "overrides": overrides}
    flow_run = run_deployment(services, "cloze-pipeline/full", parameters)
    with SyncPrefectClient(services.prefect_api) as prefect:
        # Task runs reach the database through the server's event pipeline: give it a moment.
        deadline = time.monotonic() + 60
        while True:
            task_runs = prefect.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id]))
            )
            if {run.name for run in task_runs} >= set(TASK_RUNS) or time.monotonic() > deadline:
                break
            time.sleep(1)
        [summary] = [
            item
            for item in prefect.read_artifacts()
            if item.flow_run_id == flow_run.id and item.key == "cloze-finetune-summary"
        ]
    # Every task logs "Finished in state Completed", the first one long before the rest have
    # reached the server: wait for the last stage's own line.
    logs = run_logs(services, [flow_run.id], f"{STAGE_TASKS[-1]}: computed, key ")
    # One level: the deployment's own run holds the stage tasks, in order.
    ordered = [run.name for run in sorted(task_runs, key=lambda run: run.expected_start_time)]
    assert [name for name in ordered if name in TASK_RUNS] == list(TASK_RUNS)
    # Progress: the training lines reach the run's Prefect logs, as they do for the CLI, and
    # each stage says when it starts and how it ended, with its key and figures.
    progress = [log.message for log in logs if log.name == "cloze.training"]
    assert any(line.startswith("pretrain step 12/12") for line in progress), progress
    stages = [log.message for log in logs if log.name == "flows.pipeline"]
    for stage in STAGE_TASKS:
        assert f"{stage}: started" in stages, stages
        assert any(line.startswith(f"{stage}: computed, key ") for line in stages), stages
    assert any(re.search(r"^tokenizer: computed, key \w+: vocab \d+, fert", x) for x in stages)
    assert any(line.startswith("shards: computed, key ") and ": train " in line for line in stages)
    assert not [log.message for log in logs if not log.message.strip()]  # no blank lines
    assert flow_run.name.endswith("-bert-tiny-smoke-manuals")

    client = MlflowClient(services.mlflow_uri)
    experiment = client.get_experiment_by_name("linked")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = client.search_runs([experiment.experiment_id])
    # MLflow -> Prefect: every run carries the flow run's name, id and page.
    assert {run_role(run.data.tags, run.info.run_name) for run in runs} >= {
        "pipeline",
        *STAGE_TASKS,
    }
    # The parent run takes the flow run's name; its children nest under it, named by what
    # they are (`tokenizer`, `pretrain seed 0`, `pydoc_topics finetune`).
    for run in runs:
        if "mlflow.parentRunId" not in run.data.tags:
            assert run.info.run_name == flow_run.name
        assert run.data.tags["prefect.flow_run_id"] == str(flow_run.id)
        page = run.data.tags["prefect.flow_run_url"]
        assert page.endswith(f"/runs/flow-run/{flow_run.id}")
        # The description, markdown in MLflow's UI, is a link to the flow run.
        assert run.data.tags["mlflow.note.content"] == f"Prefect flow run [{flow_run.name}]({page})"
    # Prefect -> MLflow: the summary links to the pipeline run's page.
    parent = next(run for run in runs if run_role(run.data.tags, run.info.run_name) == "pipeline")
    page = f"{services.mlflow_uri}/#/experiments/{experiment.experiment_id}/runs/"
    assert f"{page}{parent.info.run_id}" in summary.data
    # The registry version says what it is.
    pretrain = next(run for run in runs if run_role(run.data.tags, run.info.run_name) == "pretrain")
    name, version = pretrain.data.tags["cloze.registered_model"].split("/")
    description = client.get_model_version(name, version).description
    assert description.startswith("Data: manuals (files)") and "validation loss" in description
    # The serve terminal shows each progress line once, and every MLflow link it shows opens
    # the model-training view (MLflow's own "View ..." lines opened the GenAI one).
    terminal = services.serve_log.read_text()
    assert guide_quotes("deployments.md", "`pretrain step 10/60 ... loss=7.293`")
    assert terminal.count("pretrain step 12/12") == 1, terminal[-3000:]
    assert re.search(r"pretrain step 12/12 .*loss=\d+\.\d{3}", terminal), terminal[-3000:]
    run_page = f"{page}{parent.info.run_id}?workflowType=machine_learning"
    assert guide_quotes("deployments.md", "the `View run <name> at: ...` line each MLflow run")
    assert terminal.count(f"View run {parent.info.run_name} at: {run_page}") == 1
    table = f"{services.mlflow_uri}/#/experiments/{experiment.experiment_id}/runs?workflowType="
    assert guide_quotes("deployments.md", "`View experiment at: .../#/experiments/<id>/runs?")
    assert f"View experiment at: {table}machine_learning" in terminal
    links = re.findall(r"View (?:run .*?|experiment) at: (\S+)", terminal)
    assert links and all(link.endswith("workflowType=machine_learning") for link in links)
    assert "GPU available:" not in terminal  # no Lightning banners


def write_part(corpus: Path, index: int) -> Path:
    """A corpus file of stdlib docstrings: real prose, different in every part."""
    from flows.corpora.stdlib_docs import stdlib_docstrings

    texts = [doc.text for doc in stdlib_docstrings()][index * 300 : (index + 1) * 300]
    path = corpus / f"part{index}.txt"
    path.write_text("\n\n".join(texts))
    return path


def refresh_runs(client: MlflowClient) -> list[Any]:
    experiment = client.get_experiment_by_name("refresh")
    return list(
        client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    )


def test_domain_refresh_trains_on_new_files_only_and_records_its_decision(
    services: Services,
) -> None:
    corpus = services.root.parent / "news"
    corpus.mkdir()
    first_files = [write_part(corpus, 0), write_part(corpus, 1)]
    overrides = [
        *common(services, "refresh"),
        "corpus=files",
        f"corpus.paths=[{corpus}]",
        "refresh.domain=news",
        "refresh.margin=0.01",
    ]
    parameters = {"experiment": "smoke", "overrides": overrides}
    run_deployment(services, "domain-refresh/domain-refresh", parameters)
    added = write_part(corpus, 2)
    run_deployment(services, "domain-refresh/domain-refresh", parameters)
    run_deployment(services, "domain-refresh/domain-refresh", parameters)

    client = MlflowClient(services.mlflow_uri)
    runs = refresh_runs(client)
    by_parent: dict[str, list[str]] = {}
    for run in runs:
        parent = run.data.tags.get("mlflow.parentRunId")
        if parent:
            by_parent.setdefault(parent, []).append(run_role(run.data.tags, run.info.run_name))
    first, second, third = [
        run for run in runs if run_role(run.data.tags, run.info.run_name) == "domain-refresh"
    ]

    def sharded_files(run: Any) -> list[str]:
        path = client.download_artifacts(run.info.run_id, "sharded_files.txt")
        return Path(path).read_text().split()

    # First run: no champion yet, the whole corpus, promoted.
    assert sharded_files(first) == [str(path) for path in first_files]
    assert first.data.tags["cloze.refresh.decision"] == "promoted"
    assert sorted(by_parent[first.info.run_id]) == [
        "finetune-challenger",
        "pretrain",
        "shards",
        "tokenizer",
    ]
    # Second run: only the added file, continued from the champion with its tokenizer.
    assert sharded_files(second) == [str(added)]
    assert sorted(by_parent[second.info.run_id]) == [
        "finetune-challenger",
        "finetune-champion",
        "pretrain",
        "shards",
    ]
    shards = next(
        run
        for run in runs
        if run.data.tags.get("mlflow.parentRunId") == second.info.run_id
        and run_role(run.data.tags, run.info.run_name) == "shards"
    )
    assert shards.data.metrics["units"] == 1
    tags, metrics = second.data.tags, second.data.metrics
    challenger, champion = metrics["refresh.challenger_score"], metrics["refresh.champion_score"]
    expected = "promoted" if challenger - champion > 0.01 else "kept-champion"
    assert tags["cloze.refresh.decision"] == expected
    assert tags["cloze.refresh.previous_champion_version"] == "1"
    registry = client.get_model_version_by_alias("cloze-news", "champion")
    assert registry.version == ("2" if expected == "promoted" else "1")
    assert client.get_model_version_by_alias("cloze-news", "challenger").version == "2"
    artifacts = {item.path for item in client.list_artifacts(registry.run_id, "huggingface")}
    assert "huggingface/tokenizer.json" in artifacts  # the tokenizer travels with the model
    # Third run: nothing new, nothing trained, and it says so.
    assert third.data.tags["cloze.refresh.decision"] == "no-new-data"
    assert third.info.run_id not in by_parent
    manifest = services.root / "artifacts" / "domains" / "news" / "fingerprints.json"
    recorded = json.loads(manifest.read_text())["files"]
    assert sorted(recorded) == sorted(str(path) for path in [*first_files, added])


def test_a_typo_in_the_run_form_fails_the_run_in_one_line_naming_the_nearest_keys(
    services: Services,
) -> None:
    overrides = [*common(services, "typo"), "trainer.max_stepz=5"]
    flow_run = run_deployment(
        services, "cloze-pipeline/full", {"experiment": "smoke", "overrides": overrides}, "Failed"
    )
    assert flow_run.state is not None
    assert flow_run.state.message == (
        "unknown config key trainer.max_stepz; nearest valid keys: trainer.max_steps, "
        "trainer.max_tokens"
    )
    logs = run_logs(services, [flow_run.id], "Finished in state Failed")
    text = "\n".join(log.message for log in logs)
    assert f"error: {flow_run.state.message}" in text
    assert "Traceback" not in text and "+trainer" not in text


def test_the_documented_refresh_runs_from_the_shell_without_parameters_once_at_a_time(
    services: Services,
) -> None:
    """`prefect deployment run domain-refresh/domain-refresh`, twice at once, on the defaults
    the guide shows: both commands succeed (no MarkupError on `[/...]`), one refresh trains and
    promotes, the other waits for it and finds nothing new."""
    env = {**os.environ, "PREFECT_API_URL": services.prefect_api}
    env.pop("PREFECT_HOME", None)
    command = [
        sys.executable,
        "-m",
        "prefect",
        "deployment",
        "run",
        "domain-refresh/domain-refresh",
    ]
    shells = [
        subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    outputs = [shell.communicate(timeout=120)[0] for shell in shells]
    assert [shell.returncode for shell in shells] == [0, 0], outputs
    assert not any("MarkupError" in output for output in outputs), outputs
    assert "MarkupError" not in services.serve_log.read_text()
    matches = [re.search(r"UUID: ([0-9a-f-]{36})", output) for output in outputs]
    ids = [UUID(match.group(1)) for match in matches if match]
    assert len(ids) == 2, outputs
    names = {wait_for(services, flow_run_id).name for flow_run_id in ids}
    client = MlflowClient(services.mlflow_uri)
    experiment = client.get_experiment_by_name("legal")
    refreshes = [
        run
        for run in client.search_runs([experiment.experiment_id])
        if run.info.run_name in names
        and run_role(run.data.tags, run.info.run_name) == "domain-refresh"
    ]
    decisions = sorted(run.data.tags["cloze.refresh.decision"] for run in refreshes)
    assert decisions == ["no-new-data", "promoted"]
    logs = run_logs(services, ids, "domain legal: another refresh of this domain is running")
    waited = [log for log in logs if "another refresh of this domain is running" in log.message]
    assert len(waited) == 1, [log.message for log in logs]
    assert len(client.search_model_versions("name = 'cloze-legal'")) == 1  # trained once


def test_register_puts_the_same_deployments_on_a_work_pool(services: Services) -> None:
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.core.config import CONF_DIR
    from flows.deploy.cli import REPO_ROOT, register
    from flows.deploy.settings import DeploySettings

    with SyncPrefectClient(services.prefect_api) as client:
        client.create_work_pool(WorkPoolCreate(name="cloze-process", type="process"))
    with temporary_settings({PREFECT_API_URL: services.prefect_api}):
        register(
            DeploySettings.load(CONF_DIR / "deploy" / "default.yaml"),
            "cloze-process",
            str(REPO_ROOT),
        )
    with SyncPrefectClient(services.prefect_api) as client:
        stage = client.read_deployment_by_name("cloze-pipeline/shards")
        refresh = client.read_deployment_by_name("domain-refresh/domain-refresh")
    assert stage.work_pool_name == refresh.work_pool_name == "cloze-process"
    assert stage.entrypoint == "flows/deploy/entrypoints.py:pipeline_deployment"
    assert stage.parameters == {"overrides": [], "until": "shards"}
    assert refresh.entrypoint == "flows/refresh/flow.py:domain_refresh"
    assert str(REPO_ROOT) in str(stage.pull_steps)  # the worker runs this checkout
