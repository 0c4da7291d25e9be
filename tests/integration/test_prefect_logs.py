"""Our progress lines reach the Prefect logs of the flow run they belong to (local Prefect)."""

from __future__ import annotations

import logging
import warnings


def test_progress_lines_are_stored_with_their_flow_run_and_nothing_warns_outside_one() -> None:
    from prefect import flow, task
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler
    from prefect.runtime import flow_run

    from flows.tracking.prefect_logs import report_progress_to_prefect

    @task
    def train() -> None:
        logging.getLogger("cloze.training").info("pretrain step 3/3 loss=1.5")

    @flow
    def stage() -> str:
        report_progress_to_prefect()
        report_progress_to_prefect()  # a second call adds no second handler
        logging.getLogger("flows.core.artifacts").info("tokenizer: cache hit")
        train()
        return str(flow_run.get_id())

    flow_run_id = stage()
    [handler] = [
        item for item in logging.getLogger("cloze").handlers if isinstance(item, APILogHandler)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Prefect's own handler would warn here
        logging.getLogger("cloze.training").info("a line outside any flow run")
    handler.flush()
    with get_client(sync_client=True) as client:
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    lines = {(log.name, log.message) for log in logs}
    assert ("cloze.training", "pretrain step 3/3 loss=1.5") in lines
    assert ("flows.core.artifacts", "tokenizer: cache hit") in lines
    assert not any("outside" in message for _, message in lines)
