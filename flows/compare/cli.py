"""`python -m flows.compare`: what differs between pipeline runs, and what each one bought.

Reads MLflow only (the local SQLite store by default, or a server): the parent `pipeline` runs
carry the flattened config as params and every stage's final figures as metrics; each run's
`pretrain` child carries the loss curves. Writes a table of what differs (`--all`: everything),
with one column per run named as in Prefect and MLflow, two PNG charts, and the link to the same
runs in the MLflow UI's compare view, where the rest can be browsed.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from flows.compare.plots import LOSS_KEYS, Curve, lift_panels, plot_lift, plot_loss_curves
from flows.compare.selection import (
    RunSelectionError,
    Selection,
    by_ids,
    experiment_id,
    flow_run_name,
    last_runs,
    open_store,
    skipped_lines,
)
from flows.core.cli import fail
from flows.core.paths import make_writable_folder
from flows.core.settings import ConfigError
from flows.core.tables import TABLE_FORMATS, render_table
from flows.downstream.statistics.lift_points import plot_curves, read_points
from flows.stages.lift_curve import CURVE_STAGE
from flows.tracking.links import MODEL_TRAINING_VIEW, mlflow_run_url
from flows.tracking.runs import PARENT_TAG, STEP_OFFSET_TAG

FORMATS = TABLE_FORMATS
MISSING = "-"
LOCAL_UI = "http://127.0.0.1:5000"  # where `make ui` serves the local store


# What a comparison shows unless `--metrics` says otherwise, per flow (`--run-name`).
DEFAULT_METRICS = {
    "pipeline": ("pretrain.*", "finetune.*"),
    "domain-refresh": ("refresh.*", "pretrain.*", "finetune.*"),
}
# Tags shown above the metrics: what a run decided, not a number.
SHOWN_TAGS = {"cloze.refresh.decision": "decision", "cloze.refresh.reason": "reason"}


@dataclass(frozen=True)
class CompareSettings:
    """What to compare and where to write; the CLI flags map one to one."""

    tracking_uri: str
    experiment: str
    output_dir: Path
    run_ids: tuple[str, ...] = ()
    filter: str = ""
    last: int = 5
    run_name: str = "pipeline"
    metrics: tuple[str, ...] = ()  # empty: the flow's own (DEFAULT_METRICS)
    ui_url: str | None = None
    table_format: str = "markdown"
    show_all: bool = False  # every param and metric, not only those that differ
    include_unfinished: bool = False  # also runs that were killed, failed or still run

    def __post_init__(self) -> None:
        if self.last < 1:
            raise ConfigError(f"--last={self.last} must be at least 1")
        if self.table_format not in FORMATS:
            raise ConfigError(f"--format={self.table_format!r} must be one of {FORMATS}")
        if self.run_ids and self.filter:
            raise ConfigError("--run and --filter are alternatives: give run ids or a filter")


@dataclass
class Comparison:
    """Everything `compare` found and wrote; the CLI prints `text`."""

    runs: list[Run]
    params: list[tuple[str, list[str | None]]]
    metrics: list[tuple[str, list[float | None]]]
    link: str
    labels: list[str] = field(default_factory=list)  # column and legend names, one per run
    tags: list[tuple[str, list[str | None]]] = field(default_factory=list)
    loss_chart: Path | None = None
    loss_lines: dict[str, int] = field(default_factory=dict)
    lift_chart: Path | None = None
    lift_bars: int = 0
    curve_chart: Path | None = None  # lift-vs-compute curves, overlaid
    curve_lines: int = 0
    skipped: list[tuple[Run, str]] = field(default_factory=list)  # runs left out, and why
    text: str = ""


def select_runs(client: MlflowClient, experiment: str, settings: CompareSettings) -> Selection:
    """The runs to compare, oldest first: the ids given, else the last N top-level runs; those
    that did not finish are passed over (and named) unless `include_unfinished`."""
    if settings.run_ids:
        selection = by_ids(client, settings.run_ids, settings.include_unfinished)
        if not selection.runs:
            raise RunSelectionError(
                "none of the runs given finished: "
                + "; ".join(f"{run.info.run_id[:8]} {why}" for run, why in selection.skipped)
                + " (--include-unfinished compares them)"
            )
        return selection
    return last_runs(
        client,
        experiment,
        settings.run_name,
        settings.last,
        settings.filter,
        settings.include_unfinished,
    )


Row = tuple[str, list[Any]]


def differ(rows: list[Row]) -> list[Row]:
    """The rows whose value is not the same in every run (absent counts as a value)."""
    return [row for row in rows if len(set(row[1])) > 1]


def run_params(runs: Sequence[Run], show_all: bool = False) -> list[tuple[str, list[str | None]]]:
    """Each param's value per run; only those that differ unless `show_all`."""
    keys = sorted({key for run in runs for key in run.data.params})
    rows: list[Row] = [(key, [run.data.params.get(key) for run in runs]) for key in keys]
    return rows if show_all else differ(rows)


def final_metrics(
    runs: Sequence[Run], patterns: Sequence[str], show_all: bool = False
) -> list[tuple[str, list[float | None]]]:
    """Last logged value of each metric matching a glob, for every run that has it; of several
    runs only the metrics that differ unless `show_all` (48 figures, most of them equal, hid
    the few that were not)."""
    keys = sorted({key for run in runs for key in run.data.metrics})
    wanted = [key for key in keys if any(fnmatch.fnmatchcase(key, p) for p in patterns)]
    rows: list[Row] = [(key, [run.data.metrics.get(key) for run in runs]) for key in wanted]
    return rows if show_all or len(runs) == 1 else differ(rows)


def shown_tags(runs: Sequence[Run]) -> list[tuple[str, list[str | None]]]:
    """The decision (and its reason) of refresh runs, where any run has one."""
    rows = [(label, [run.data.tags.get(tag) for run in runs]) for tag, label in SHOWN_TAGS.items()]
    return [(label, values) for label, values in rows if any(values)]


def stage_child(client: MlflowClient, run: Run, stage: str) -> Run | None:
    """The run itself if it is that stage's run, else its child run for the stage."""
    if run.data.tags.get("cloze.stage") == stage:
        return run
    children = client.search_runs(
        [run.info.experiment_id],
        f"tags.`{PARENT_TAG}` = '{run.info.run_id}' AND tags.`cloze.stage` = '{stage}'",
        max_results=1,
    )
    return children[0] if children else None


def loss_curves(client: MlflowClient, run: Run) -> dict[str, Curve]:
    """Pretraining loss per step; for a cache hit, the curves of the run that trained it."""
    child = stage_child(client, run, "pretrain")
    if child is None:
        return {}
    sources = [child]
    key = child.data.tags.get("cloze.artifact_key")
    if child.data.tags.get("cloze.cache_hit") == "true" and key:
        sources += client.search_runs(
            [child.info.experiment_id],
            f"tags.`cloze.artifact_key` = '{key}' AND tags.`cloze.cache_hit` = 'false' "
            "AND tags.`cloze.stage` = 'pretrain'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
    for source in sources:
        # A continued run counts its steps from 0; drawn after the steps it continued from.
        offset = int(source.data.tags.get(STEP_OFFSET_TAG, 0))
        curves = {
            name: [
                (offset + m.step, m.value)
                for m in client.get_metric_history(source.info.run_id, name)
            ]
            for name in LOSS_KEYS
        }
        if any(curves.values()):
            return curves
    return {}


def compare_link(ui_url: str, runs: Sequence[Run]) -> str:
    """The MLflow UI's compare view for these runs (its run page when there is only one)."""
    base = ui_url.rstrip("/")
    if len(runs) == 1:
        return mlflow_run_url(base, runs[0].info.experiment_id, runs[0].info.run_id)
    experiments = sorted({run.info.experiment_id for run in runs})

    def encoded(values: Sequence[str]) -> str:
        return urllib.parse.quote(json.dumps(list(values), separators=(",", ":")), safe="[],")

    run_ids = [run.info.run_id for run in runs]
    return (
        f"{base}/#/compare-runs?runs={encoded(run_ids)}&experiments={encoded(experiments)}"
        f"&{MODEL_TRAINING_VIEW}"
    )


def run_labels(runs: Sequence[Run]) -> list[str]:
    """Each run's flow run name (`bert-mini-pubmed-20261202-230637`), as Prefect and MLflow show
    it; a run named after its flow alone, or a name two runs share, gets its run id's first
    characters instead."""
    names = [flow_run_name(run) for run in runs]
    return [
        name if name and names.count(name) == 1 else run.info.run_id[:8]
        for name, run in zip(names, runs, strict=True)
    ]


def format_value(value: str | float | None) -> str:
    if value is None:
        return MISSING
    if isinstance(value, str):
        return value
    if value == int(value) and abs(value) < 1e12:
        return str(int(value))
    return f"{value:.4g}"


def render(comparison: Comparison, table_format: str, show_all: bool = False) -> str:
    runs = comparison.runs
    header = ["", *comparison.labels]
    started = [
        "started (UTC)",
        *(
            datetime.fromtimestamp(run.info.start_time / 1000, UTC).strftime("%Y-%m-%d %H:%M")
            for run in runs
        ),
    ]
    params = [[key, *map(format_value, values)] for key, values in comparison.params]
    metrics = [[key, *map(format_value, values)] for key, values in comparison.tags]
    metrics += [[key, *map(format_value, values)] for key, values in comparison.metrics]
    if len(runs) == 1:
        params_text = "(a single run: nothing to compare)"
    else:
        params_text = render_table(header, [started, *params], table_format)
        if not params:
            params_text += "\n(every param is the same in all runs)"
    which = "" if show_all or len(runs) == 1 else " that differ"
    sections = [
        *skipped_lines(comparison.skipped),
        f"Params{which} ({len(params)})",
        params_text,
        "",
        f"Final metrics{which} ({len(metrics)})",
        render_table(header, metrics, table_format) if metrics else "(none logged)",
        "",
    ]
    charts = [
        ("loss curves", comparison.loss_chart),
        ("lift chart", comparison.lift_chart),
        ("lift-vs-compute curves", comparison.curve_chart),
    ]
    sections += [f"{name}: {path or '(no data to plot)'}" for name, path in charts]
    sections.append(f"MLflow UI: {comparison.link}")
    if which:
        sections.append("(--all shows every param and metric)")
    return "\n".join(sections)


def check_output_dir(folder: Path) -> None:
    """Refuses, before reading any run, a chart folder that cannot be written (the default sits
    under `paths.root`, which may be read-only while its MLflow store is still readable)."""
    try:
        make_writable_folder(folder)
    except OSError as error:
        raise ConfigError(
            f"{folder} is not writable ({error.strerror}): compare writes its charts there "
            "(--out, by default <paths.root>/compare); pass --out with a writable folder"
        ) from error


def compare(settings: CompareSettings) -> Comparison:
    check_output_dir(settings.output_dir)
    client = open_store(settings.tracking_uri)
    selection = select_runs(client, experiment_id(client, settings.experiment), settings)
    runs = selection.runs
    ui_url = settings.ui_url or (
        settings.tracking_uri if settings.tracking_uri.startswith("http") else LOCAL_UI
    )
    comparison = Comparison(
        runs=runs,
        params=run_params(runs, settings.show_all),
        metrics=final_metrics(
            runs,
            settings.metrics or DEFAULT_METRICS.get(settings.run_name, ("*",)),
            settings.show_all,
        ),
        link=compare_link(ui_url, runs),
        labels=run_labels(runs),
        tags=shown_tags(runs),
        skipped=selection.skipped,
    )
    labels = comparison.labels
    curves = {label: loss_curves(client, run) for label, run in zip(labels, runs, strict=True)}
    if any(any(history.values()) for history in curves.values()):
        comparison.loss_chart = settings.output_dir / "loss_curves.png"
        comparison.loss_lines = plot_loss_curves(curves, comparison.loss_chart)
    panels = lift_panels([run.data.metrics for run in runs])
    if panels:
        comparison.lift_chart = settings.output_dir / "lift.png"
        comparison.lift_bars = plot_lift(labels, panels, comparison.lift_chart)
    series = {
        f"{label} {task}": points
        for label, run in zip(labels, runs, strict=True)
        for task, points in read_points(run.data.metrics, f"{CURVE_STAGE}.").items()
    }
    if series:
        comparison.curve_chart = settings.output_dir / "lift_curve.png"
        plot_curves(series, comparison.curve_chart)
        comparison.curve_lines = len(series)
    comparison.text = render(comparison, settings.table_format, settings.show_all)
    return comparison


def parse_args(argv: Sequence[str], prog: str = "python -m flows.compare") -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Compare Cloze pipeline runs recorded in MLflow: the params that differ, "
        "the final metrics, loss curves and lift charts (PNG), and the MLflow UI compare link.",
    )
    parser.add_argument("--tracking-uri", help="default: the pipeline's store (paths.root)")
    parser.add_argument("--experiment", help="default: tracking.experiment from conf/")
    parser.add_argument(
        "--run",
        action="append",
        default=[],
        dest="run_ids",
        metavar="RUN_ID",
        help="a run to compare; repeat for more (default: the last N top-level runs)",
    )
    parser.add_argument(
        "--filter",
        default="",
        help="MLflow search filter, e.g. \"params.`model.name` = 'bert-mini'\"",
    )
    parser.add_argument("--last", type=int, default=5, help="the last N pipeline runs (default 5)")
    parser.add_argument(
        "--run-name", default="pipeline", help="top-level runs to pick: pipeline, domain-refresh"
    )
    parser.add_argument(
        "--metrics",
        nargs="+",
        default=[],
        metavar="GLOB",
        help="metrics to show (default: pretrain.* finetune.*; for domain-refresh also refresh.*)",
    )
    parser.add_argument("--out", type=Path, help="where the PNGs go (default <paths.root>/compare)")
    parser.add_argument(
        "--ui", dest="ui_url", help=f"MLflow UI base URL (default {LOCAL_UI} or the server)"
    )
    parser.add_argument("--format", dest="table_format", choices=FORMATS, default="markdown")
    parser.add_argument(
        "--all",
        dest="show_all",
        action="store_true",
        help="every param and metric (default: only those that differ between the runs)",
    )
    parser.add_argument(
        "--include-unfinished",
        action="store_true",
        help="also compare runs that were killed, failed or still run (default: finished runs "
        "only; the output names each run it skipped)",
    )
    return parser.parse_args(list(argv))


def settings_from_args(args: argparse.Namespace) -> CompareSettings:
    """Flags, with the pipeline's own defaults (from `conf/`) for the store and experiment."""
    from flows.core.paths import RunPaths
    from flows.resolve import resolve_run

    run = resolve_run([], until=None).run
    paths = RunPaths.from_settings(run.paths)
    return CompareSettings(
        tracking_uri=args.tracking_uri or paths.tracking_uri(run.tracking.uri),
        experiment=args.experiment or run.tracking.experiment,
        output_dir=args.out or paths.root / "compare",
        run_ids=tuple(args.run_ids),
        filter=args.filter,
        last=args.last,
        run_name=args.run_name,
        metrics=tuple(args.metrics),
        ui_url=args.ui_url,
        table_format=args.table_format,
        show_all=args.show_all,
        include_unfinished=args.include_unfinished,
    )


def main(argv: Sequence[str], prog: str = "python -m flows.compare") -> int:
    args = parse_args(argv, prog)
    try:
        print(compare(settings_from_args(args)).text)
    except (ConfigError, RunSelectionError) as error:
        return fail(error)
    return 0
