"""`python -m benchmarks.served_start`: where a served run's start goes, trigger to first stage,
beside a bare Prefect flow served the same way.

Starts a Prefect server on 127.0.0.1 and, in turn, `python -m flows.deploy serve` and the peer
`python -m benchmarks.bare_served_flow` (the helpers of tests/integration/servers.py, both polling
every second), triggers `cloze-pipeline/tokenizer` (smoke config) and `bare/peer` RUNS times each,
and reads each run's timestamps back from Prefect: created (the trigger), the runner's
"Downloading flow code" (it picked the run up), "Beginning flow run" (the flow's process has
imported everything and started the flow), the first line of the flow's own work ("tokenizer:
started", the first stage; the peer's one line). The peer's figures are the floor any served
Prefect flow pays here; the difference is what Cloze adds. Then it times the flow process's
imports alone (`python -X importtime`), by top-level package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from benchmarks.bare_served_flow import DEPLOYMENT as BARE_DEPLOYMENT
from benchmarks.bare_served_flow import FIRST_LINE as BARE_FIRST_LINE

ENTRYPOINT = "flows.deploy.entrypoints"


@dataclass(frozen=True)
class ServedFlow:
    """One served deployment: the process that serves it and the line its own work starts with."""

    name: str
    deployment: str
    first_line: str
    module: str | None = None  # None: `python -m flows.deploy serve`
    parameters: dict[str, Any] = field(default_factory=dict)

    def marks(self) -> dict[str, str]:
        """The log lines to time; a flow served from its own module (`Flow.serve`, the peer)
        downloads no code, so it logs no "picked up"."""
        picked_up = {"picked up": "Downloading flow code"} if self.module is None else {}
        return {**picked_up, "flow began": "Beginning flow run", "first stage": self.first_line}


def served_flows(root: Path, mlflow_uri: str) -> list[ServedFlow]:
    """Cloze's tokenizer deployment tracking to a local SQLite file (the demo's store) and to an
    MLflow server (a team's: MLflow's SQL store is never imported), and the bare peer."""
    overrides = ["experiment=smoke", f"paths.root={root / 'run'}"]
    deployment, first_line = "cloze-pipeline/tokenizer", "tokenizer: started"
    return [
        ServedFlow("cloze, SQLite", deployment, first_line, None, {"overrides": overrides}),
        ServedFlow(
            "cloze, MLflow server",
            deployment,
            first_line,
            None,
            {"overrides": [*overrides, f"tracking.uri={mlflow_uri}"]},
        ),
        ServedFlow(
            "bare Prefect flow", BARE_DEPLOYMENT, BARE_FIRST_LINE, "benchmarks.bare_served_flow"
        ),
    ]


def run_marks(
    api: str, flow_run_id: UUID, marks_text: dict[str, str], timeout: float = 600
) -> dict[str, datetime]:
    """The run's creation and the first log line of each mark, once it has ended."""
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with SyncPrefectClient(api) as client:
        deadline = time.monotonic() + timeout
        while True:
            flow_run = client.read_flow_run(flow_run_id)
            if flow_run.state is not None and flow_run.state.is_final():
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{flow_run.name} still {flow_run.state}")
            time.sleep(1)
        if not flow_run.state.is_completed():
            # A served flow that fails after its first line still has a start to time: the
            # benchmark would report figures for a deployment that no longer runs.
            raise RuntimeError(f"{flow_run.name} ended {flow_run.state.name}: {flow_run.state}")
        marks = {"created": flow_run.created}
        late = time.monotonic() + 30  # the flow's process sends its last lines as it exits
        while len(marks) <= len(marks_text) and time.monotonic() < late:
            time.sleep(1)
            logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            for name, text in marks_text.items():
                found = [log.timestamp for log in logs if log.message.startswith(text)]
                if found:
                    marks[name] = min(found)
    return marks  # type: ignore[return-value]


def served_starts(
    api: str, served: ServedFlow, runs: int, root: Path, start_timeout: float
) -> list[dict[str, float]]:
    """Seconds from the trigger to each mark, per run of one served flow."""
    from prefect.client.orchestration import SyncPrefectClient

    from tests.integration.servers import serving_deployments

    env = {key: value for key, value in os.environ.items() if key != "PREFECT_HOME"}
    forget_deployment(api, served.deployment)
    results = []
    slug = re.sub(r"\W+", "-", served.name)
    log = root / f"serve-{slug}.log"
    with (
        serving_deployments(
            api, log, env, [served.deployment], start_timeout, module=served.module
        ),
        SyncPrefectClient(api) as client,
    ):
        deployment = client.read_deployment_by_name(served.deployment)
        for _ in range(runs):
            flow_run = client.create_flow_run_from_deployment(
                deployment.id, parameters=served.parameters
            )
            marks = run_marks(api, flow_run.id, served.marks())
            start = marks["created"]
            results.append({name: (when - start).total_seconds() for name, when in marks.items()})
    return results


def forget_deployment(api: str, name: str) -> None:
    """Deletes `name` if an earlier serve process registered it: else the next one counts as
    ready before it registers and polls, and its first run waits for it."""
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.exceptions import ObjectNotFound

    with SyncPrefectClient(api) as client, contextlib.suppress(ObjectNotFound):
        client.delete_deployment(client.read_deployment_by_name(name).id)


def report(served: ServedFlow, results: list[dict[str, float]]) -> dict[str, float]:
    """Prints each run's figures; returns each mark's median over the runs that logged it."""
    for index, marks in enumerate(results, start=1):
        figures = ", ".join(
            f"{name} {seconds:.1f} s" for name, seconds in marks.items() if name != "created"
        )
        print(f"{served.name}, run {index}: {figures}")
    names = {name for run in results for name in run} - {"created"}
    return {name: statistics.median(run[name] for run in results if name in run) for name in names}


def import_seconds() -> dict[str, float]:
    """The flow process's imports: seconds spent in each top-level package's own modules."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {ENTRYPOINT}"],
        capture_output=True,
        text=True,
        check=True,
    )
    totals: dict[str, float] = defaultdict(float)
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if match:
            totals[match.group(2).split(".")[0]] += int(match.group(1)) / 1e6
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.served_start", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=180,
        help="seconds each server and serving process gets to start (more on a loaded machine)",
    )
    args = parser.parse_args(argv)
    from tests.integration.servers import mlflow_server, prefect_server

    print(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="served-start-") as directory:
        root = Path(directory)
        (root / "mlflow").mkdir()
        with (
            prefect_server(root / "prefect", timeout=args.start_timeout) as api,
            mlflow_server(root / "mlflow", timeout=args.start_timeout) as mlflow_uri,
        ):
            typical = {
                served.name: report(
                    served, served_starts(api, served, args.runs, root, args.start_timeout)
                )
                for served in served_flows(root, mlflow_uri)
            }
        bare = typical.pop("bare Prefect flow")
        for name, cloze in typical.items():
            print(
                f"median, {name} minus the bare Prefect flow: "
                + ", ".join(f"{mark} {cloze[mark] - bare[mark]:+.1f} s" for mark in sorted(bare))
            )
    started = time.perf_counter()
    imports = import_seconds()
    print(f"import {ENTRYPOINT}: {time.perf_counter() - started:.1f} s wall")
    print(
        "  " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in list(imports.items())[:8])
    )
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
