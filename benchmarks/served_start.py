"""`python -m benchmarks.served_start`: where a served run's start goes, trigger to first stage.

Starts a Prefect server and `python -m flows.deploy serve` on 127.0.0.1 (the helpers of
tests/integration/servers.py), triggers `cloze-pipeline/tokenizer` RUNS times on the smoke
config, and reads each run's timestamps back from Prefect: created (the trigger), the runner's
"Downloading flow code" (it picked the run up), "Beginning flow run" (the flow's process has
imported everything and started the flow), "tokenizer: started" (the first stage). Then it times
the flow process's imports alone (`python -X importtime`), by top-level package.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from uuid import UUID

MARKS = {
    "picked up": "Downloading flow code",
    "flow began": "Beginning flow run",
    "first stage": "tokenizer: started",
}
ENTRYPOINT = "flows.deploy.entrypoints"


def run_marks(api: str, flow_run_id: UUID, timeout: float = 600) -> dict[str, datetime]:
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
        marks = {"created": flow_run.created}
        late = time.monotonic() + 30  # the flow's process sends its last lines as it exits
        while len(marks) <= len(MARKS) and time.monotonic() < late:
            time.sleep(1)
            logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            for name, text in MARKS.items():
                found = [log.timestamp for log in logs if log.message.startswith(text)]
                if found:
                    marks[name] = min(found)
    return marks  # type: ignore[return-value]


def served_starts(runs: int, root: Path) -> list[dict[str, float]]:
    """Seconds from the trigger to each mark, per run."""
    from prefect.client.orchestration import SyncPrefectClient

    from tests.integration.servers import prefect_server, serving_deployments

    overrides = ["experiment=smoke", f"paths.root={root / 'run'}"]
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_HOME"}
    results = []
    with (
        prefect_server(root / "prefect") as api,
        serving_deployments(api, root / "serve.log", env, ["cloze-pipeline/tokenizer"]),
        SyncPrefectClient(api) as client,
    ):
        deployment = client.read_deployment_by_name("cloze-pipeline/tokenizer")
        for _ in range(runs):
            flow_run = client.create_flow_run_from_deployment(
                deployment.id, parameters={"overrides": overrides}
            )
            marks = run_marks(api, flow_run.id)
            start = marks["created"]
            results.append({name: (when - start).total_seconds() for name, when in marks.items()})
    return results


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
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="served-start-") as directory:
        for index, marks in enumerate(served_starts(args.runs, Path(directory)), start=1):
            figures = ", ".join(
                f"{name} {seconds:.1f} s" for name, seconds in marks.items() if name != "created"
            )
            print(f"run {index}: {figures}")
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
