"""Slow: an operator's walk through the Prefect and MLflow UIs, in real headless Chromium.

Real servers on 127.0.0.1, a smoke pipeline run from a served deployment, then the pages a
person opens: the Prefect flow run, the MLflow experiment's runs table, the MLflow run and its
link back to Prefect. Screenshots of each page are kept under build/test-artifacts/ui-walk/.
Chromium comes from Debian's `chromium` package (`.ci/run` installs it); Playwright drives it and
downloads no browser of its own.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from prefect.client.orchestration import SyncPrefectClient

from flows.core.paths import REPO_ROOT
from flows.tracking.links import MODEL_TRAINING_VIEW
from tests.fakes import SERVED_RUN
from tests.integration.servers import mlflow_server, prefect_server, serving_deployments

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium")
SHOTS = REPO_ROOT / "build" / "test-artifacts" / "ui-walk"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("no chromium: install Debian's package (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Both servers, `serve`, and one smoke pipeline run triggered from its deployment."""
    base = tmp_path_factory.mktemp("walk")
    (base / "mlflow").mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_HOME"}
    with (
        prefect_server(base / "prefect", services=True) as api,
        mlflow_server(base / "mlflow") as uri,
        serving_deployments(api, base / "serve.log", env, ["cloze-pipeline/full"]),
        SyncPrefectClient(api) as client,
    ):
        deployment = client.read_deployment_by_name("cloze-pipeline/full")
        overrides = [f"paths.root={base / 'run'}", f"tracking.uri={uri}", *SERVED_RUN]
        parameters = {"experiment": "smoke", "overrides": overrides}
        flow_run = client.create_flow_run_from_deployment(deployment.id, parameters=parameters)
        deadline = time.monotonic() + 900
        while not (state := client.read_flow_run(flow_run.id).state) or not state.is_final():
            assert time.monotonic() < deadline, (base / "serve.log").read_text()[-3000:]
            time.sleep(2)
        assert state.name == "Completed", (base / "serve.log").read_text()[-3000:]
        flow_run = client.read_flow_run(flow_run.id)
        experiment = MlflowClient(uri).get_experiment_by_name("cloze")
        assert experiment is not None
        yield {
            "prefect": api.removesuffix("/api"),
            "mlflow": uri,
            "flow_run": flow_run,
            "experiment_id": experiment.experiment_id,
            "runs": MlflowClient(uri).search_runs([experiment.experiment_id]),
        }


def shoot(page: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    (SHOTS / f"{name}.txt").write_text(f"{page.url}\n\n{page.inner_text('body')}")
    return path


def opened(browser: Any, url: str) -> Any:
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.goto(url)
    return page


def test_the_prefect_flow_run_page_shows_the_run_under_the_one_flow(
    browser: Any, walk: dict[str, Any]
) -> None:
    flow_run = walk["flow_run"]
    page = opened(browser, f"{walk['prefect']}/runs/flow-run/{flow_run.id}")
    try:
        page.get_by_text(flow_run.name).first.wait_for(timeout=60_000)
        page.get_by_text("Completed").first.wait_for(timeout=30_000)
    finally:
        shoot(page, "1-prefect-flow-run")
    body = page.inner_text("body")
    assert "cloze-pipeline" in body and "Task runs" in body, body[:2000]


def test_the_mlflow_runs_table_opens_in_the_model_training_view_with_distinct_names(
    browser: Any, walk: dict[str, Any]
) -> None:
    experiment = walk["experiment_id"]
    url = f"{walk['mlflow']}/#/experiments/{experiment}/runs?{MODEL_TRAINING_VIEW}"
    page = opened(browser, url)
    try:
        page.locator(f"{NAME_CELLS} a[href*='/runs/'] span").first.wait_for(timeout=60_000)
        expand_child_runs(page)
        shown = shown_run_names(page)
    finally:
        shoot(page, "2-mlflow-runs-table")
    # The model-training view: its runs table and menus, not the GenAI overview.
    assert "workflowType=machine_learning" in page.url
    menu = page.locator("nav").first.inner_text().split()
    assert {"Runs", "Models"} <= set(menu) and "Observability" not in menu, menu
    # Every run of the pipeline is in the table, and what the name column shows of each differs.
    assert sorted(full for full, _ in shown) == sorted(run.info.run_name for run in walk["runs"])
    visible = [part for _, part in shown]
    assert len(set(visible)) == len(visible), visible


# The Run Name column's cells; its expand buttons show a plus while their children are hidden.
NAME_CELLS = "[col-id='attributes.`Run Name`']"
EXPAND = f"{NAME_CELLS} button:has(path[d^='M7.25 7.25V4.5'])"


def expand_child_runs(page: Any) -> None:
    """Opens every collapsed parent row (MLflow nests child runs under their parent)."""
    for _ in range(10):
        if page.locator(EXPAND).count() == 0:
            return
        page.locator(EXPAND).first.click()
        page.wait_for_timeout(500)


def shown_run_names(page: Any) -> list[tuple[str, str]]:
    """Each row's run name and the part of it the column shows: the characters that fit in the
    cell's width (the rest is behind an ellipsis)."""
    spans = page.locator(f"{NAME_CELLS} a[href*='/runs/'] span")
    measured = [
        spans.nth(index).evaluate("span => [span.textContent, span.clientWidth, span.scrollWidth]")
        for index in range(spans.count())
    ]
    return [
        (text, text if scroll <= width else text[: max(1, len(text) * width // scroll - 1)])
        for text, width, scroll in measured
    ]


def test_the_mlflow_run_links_back_to_its_prefect_flow_run(
    browser: Any, walk: dict[str, Any]
) -> None:
    flow_run = walk["flow_run"]
    parent = next(run for run in walk["runs"] if "mlflow.parentRunId" not in run.data.tags)
    assert parent.info.run_name == flow_run.name  # one name in both UIs
    run_page = (
        f"{walk['mlflow']}/#/experiments/{walk['experiment_id']}/runs/{parent.info.run_id}"
        f"?{MODEL_TRAINING_VIEW}"
    )
    page = opened(browser, run_page)
    link = page.locator(f"a[href$='/runs/flow-run/{flow_run.id}']").first
    try:
        link.wait_for(timeout=60_000)
    finally:
        shoot(page, "3-mlflow-run")
    link.evaluate("element => element.removeAttribute('target')")  # follow it in this tab
    link.click()
    page.wait_for_url(f"**/runs/flow-run/{flow_run.id}", timeout=30_000)
    page.get_by_text(flow_run.name).first.wait_for(timeout=60_000)
    shoot(page, "4-prefect-from-mlflow")
