"""Which MLflow runs `compare` reads, and which it passed over and why.

A run that did not finish (killed, failed, still running) holds partial figures: compared beside
finished runs it reads as a result. By default only finished runs are compared; every run
passed over is named with its status, so nothing is left out silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from flows.tracking.links import ROLE_TAG, run_role
from flows.tracking.runs import PARENT_TAG

FINISHED = "FINISHED"
# Why a run's figures are not final, by its MLflow status.
UNFINISHED_REASONS = {
    "RUNNING": "still running, or its process died and no later run has closed it yet",
    "SCHEDULED": "never started",
    "KILLED": "stopped before it finished (a signal or Ctrl-C)",
    "FAILED": "failed before it finished",
}
# How many top-level runs one search reads: enough for `--last N` past unfinished ones.
SEARCH_LIMIT = 500


class RunSelectionError(LookupError):
    """The store, experiment or runs asked for are not there; the message says what is."""


@dataclass(frozen=True)
class Selection:
    """The runs to compare, oldest first; the runs passed over, newest first, with why."""

    runs: list[Run]
    skipped: list[tuple[Run, str]] = field(default_factory=list)


def open_store(tracking_uri: str) -> MlflowClient:
    """A client, refusing a SQLite path that does not exist (MLflow would create an empty one)."""
    if tracking_uri.startswith("sqlite:///"):
        path = Path(tracking_uri.removeprefix("sqlite:///"))
        if not path.is_file():
            raise RunSelectionError(
                f"no MLflow store at {path}: run the pipeline first, or pass --tracking-uri"
            )
    return MlflowClient(tracking_uri)


def experiment_id(client: MlflowClient, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is None:
        names = sorted(experiment.name for experiment in client.search_experiments())
        raise RunSelectionError(
            f"experiment {name!r} not found; experiments in this store: "
            f"{', '.join(names) or '(none)'}"
        )
    return str(found.experiment_id)


def why_unfinished(run: Run) -> str | None:
    """None for a finished run, else its status and what that means for its figures."""
    status = run.info.status
    if status == FINISHED:
        return None
    return f"{status}, {UNFINISHED_REASONS.get(status, 'not finished')}"


def flow_run_name(run: Run) -> str:
    """The name Prefect and MLflow show for a top-level run: its own (older stores named it
    `<flow run name>/<flow>`, and a run outside any flow run is named after its flow alone)."""
    name = str(run.info.run_name or "")
    if ROLE_TAG not in run.data.tags and "/" in name:
        return name.rsplit("/", 1)[0]
    return "" if name == run_role(run.data.tags, name) else name


def by_ids(client: MlflowClient, run_ids: Sequence[str], include_unfinished: bool) -> Selection:
    runs = []
    for run_id in run_ids:
        try:
            runs.append(client.get_run(run_id))
        except MlflowException as error:
            raise RunSelectionError(f"run {run_id!r} not found: {error.message}") from error
    if include_unfinished:
        return Selection(runs)
    reasons = [(run, why_unfinished(run)) for run in runs]
    skipped = [(run, why) for run, why in reasons if why is not None]
    return Selection([run for run, why in reasons if why is None], skipped[::-1])


def top_level_runs(
    client: MlflowClient, experiment: str, role: str, extra_filter: str
) -> list[Run]:
    """Top-level runs of the flow `role` (`pipeline`, `domain-refresh`), newest first: tagged
    with their role, or, in an older store, named `<flow run name>/<role>`."""
    found: dict[str, Run] = {}
    for condition in (f"tags.`{ROLE_TAG}` = '{role}'", f"attributes.run_name LIKE '%{role}'"):
        conditions = [condition, extra_filter] if extra_filter else [condition]
        try:
            runs = client.search_runs(
                [experiment],
                " AND ".join(conditions),
                order_by=["attributes.start_time DESC"],
                max_results=SEARCH_LIMIT,
            )
        except MlflowException as error:
            raise RunSelectionError(f"bad --filter {extra_filter!r}: {error.message}") from error
        for run in runs:
            top_level = PARENT_TAG not in run.data.tags
            if top_level and run_role(run.data.tags, run.info.run_name) == role:
                found[run.info.run_id] = run
    return sorted(found.values(), key=lambda run: run.info.start_time, reverse=True)


def last_runs(
    client: MlflowClient,
    experiment: str,
    role: str,
    last: int,
    extra_filter: str = "",
    include_unfinished: bool = False,
) -> Selection:
    """The newest `last` top-level runs that finished (any, with `include_unfinished`), oldest
    first; the unfinished runs newer than the oldest of them are the ones passed over."""
    kept: list[Run] = []
    skipped: list[tuple[Run, str]] = []
    for run in top_level_runs(client, experiment, role, extra_filter):
        if len(kept) == last:
            break
        why = why_unfinished(run)
        if why is None or include_unfinished:
            kept.append(run)
        else:
            skipped.append((run, why))
    if not kept:
        where = f" match {extra_filter!r}" if extra_filter else ""
        passed = f" ({len(skipped)} did not finish; --include-unfinished reads them)"
        raise RunSelectionError(
            f"no top-level runs named {role!r} that finished in this experiment{where}"
            + (passed if skipped else "")
        )
    return Selection(kept[::-1], skipped)


def skipped_lines(skipped: Sequence[tuple[Run, str]]) -> list[str]:
    """What `compare` says first: every run it left out, and why."""
    if not skipped:
        return []
    count = f"{len(skipped)} run{'s' if len(skipped) > 1 else ''}"
    lines = [f"Skipped {count} that did not finish (--include-unfinished compares them too):"]
    for run, why in skipped:
        name = flow_run_name(run) or run.info.run_name
        lines.append(f"- {name} (run {run.info.run_id[:8]}): {why}")
    return [*lines, ""]
