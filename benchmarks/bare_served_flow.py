"""`python -m benchmarks.bare_served_flow`: the peer of `benchmarks.served_start`, a flow that
imports nothing but Prefect and logs one line, served by Prefect's own `Flow.serve`.

Its trigger-to-line time is what any served Prefect flow costs on this machine (the runner's poll,
a fresh Python process, Prefect's engine and its import); Cloze's start is measured against it, so
what Cloze adds is told apart from what it cannot remove without leaving Prefect's runner.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

DEPLOYMENT = "bare/peer"
FIRST_LINE = "bare flow: started"


@flow(name="bare")
def bare() -> None:
    get_run_logger().info(FIRST_LINE)


if __name__ == "__main__":
    bare.serve(name=DEPLOYMENT.split("/")[1])
