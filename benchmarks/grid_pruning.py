"""What `finetune.grid_pruning_margin` would have changed in a finished run, replayed from its
per-epoch validation scores in MLflow.

Fine-tuning runs are deterministic, so a pruned run's epochs are exactly the first epochs of its
full run (tests/unit/flows/downstream/test_grid_pruning.py). A run's MLflow metrics (each task's
child run logs `[at<fraction>-]<arm>-lr<rate>-seed<seed>-val/score` after every epoch) therefore
tell which grid rates the rule (flows/downstream/finetuning/pruning.py, the product's own code)
would have dropped and when, whether any arm's chosen rate would differ, and how many fine-tuning
epochs it would have saved, without training anything again.

    python -m benchmarks.grid_pruning --tracking-uri sqlite:///.cloze/mlflow.db --margins 0.01,0.02
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from dataclasses import dataclass

from mlflow.tracking import MlflowClient

from benchmarks.common import markdown_table
from flows.downstream.finetuning.pruning import GridPruning, would_prune

SCORE_KEY = re.compile(
    r"^(?:(?P<point>at[0-9.]+)-)?(?P<arm>[a-z_]+)-lr(?P<rate>[0-9.e+-]+)-seed(?P<seed>\d+)-val/score$"
)


@dataclass(frozen=True)
class Curve:
    """One fine-tuning run's validation score after each epoch, and when it started."""

    rate: float
    started: int  # the first score's timestamp: grid runs are replayed in the order they ran
    scores: tuple[float, ...]


@dataclass(frozen=True)
class Replay:
    """One arm's grid (its grid seed's runs), as run and as the rule would have run it."""

    group: str  # `task [point] arm seed`
    chosen: float  # the rate the full grid chose (the best validation score; first of equals)
    chosen_pruned: float  # the rate chosen among the runs the rule would have kept
    epochs: int  # epochs the full grid trained
    epochs_pruned: int  # epochs it would have trained with the rule
    dropped: tuple[str, ...]  # `rate@epoch` of each run the rule would have stopped


def replay(curves: list[Curve], margin: float) -> tuple[float, float, int, int, list[str]]:
    """(chosen, chosen with the rule, epochs, epochs with the rule, dropped runs) of one grid."""
    kept: list[Curve] = []
    epochs_pruned, dropped = 0, []
    for curve in sorted(curves, key=lambda c: c.started):
        stop = None
        if kept:
            leader = max(kept, key=lambda c: max(c.scores))
            stop = would_prune(curve.scores, GridPruning(leader.scores, margin))
        epochs_pruned += stop or len(curve.scores)
        if stop is None:
            kept.append(curve)
        else:
            dropped.append(f"{curve.rate:g}@{stop}")

    def best(runs: list[Curve]) -> float:
        ordered = sorted(runs, key=lambda c: c.started)
        return max(ordered, key=lambda c: max(c.scores)).rate

    full = sum(len(c.scores) for c in curves)
    return best(curves), best(kept), full, epochs_pruned, dropped


def read_curves(client: MlflowClient, run_id: str) -> dict[tuple[str, str, int], list[Curve]]:
    """A task run's curves grouped by (point, arm, seed); the point is "" at the final weights."""
    run = client.get_run(run_id)
    groups: dict[tuple[str, str, int], list[Curve]] = defaultdict(list)
    for key in run.data.metrics:
        match = SCORE_KEY.match(key)
        if match is None:
            continue
        history = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
        group = (match["point"] or "", match["arm"], int(match["seed"]))
        scores = tuple(m.value for m in history)
        groups[group].append(Curve(float(match["rate"]), history[0].timestamp, scores))
    return groups


def task_runs(client: MlflowClient, experiment: str) -> dict[str, str]:
    """Every task child run of the experiment (its name is the task's), by task: the latest."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise SystemExit(f"error: no MLflow experiment {experiment!r}")
    runs = client.search_runs([found.experiment_id], order_by=["attributes.start_time ASC"])
    return {
        run.info.run_name: run.info.run_id
        for run in runs
        if any(SCORE_KEY.match(key) for key in run.data.metrics)
    }


def replays(client: MlflowClient, experiment: str, margin: float) -> list[Replay]:
    rows = []
    for task, run_id in task_runs(client, experiment).items():
        for (point, arm, seed), curves in sorted(read_curves(client, run_id).items()):
            if len({c.rate for c in curves}) < 2:
                continue  # a seed trained at the chosen rate alone: no grid to prune
            chosen, chosen_pruned, epochs, epochs_pruned, dropped = replay(curves, margin)
            group = " ".join(filter(None, (task, point, arm, f"seed {seed}")))
            rows.append(Replay(group, chosen, chosen_pruned, epochs, epochs_pruned, tuple(dropped)))
    return rows


def all_epochs(client: MlflowClient, experiment: str) -> int:
    """Every fine-tuning epoch the experiment's task runs trained (grids and other seeds)."""
    return sum(
        len(curve.scores)
        for run_id in task_runs(client, experiment).values()
        for curves in read_curves(client, run_id).values()
        for curve in curves
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracking-uri", required=True, help="e.g. sqlite:///.cloze/mlflow.db")
    parser.add_argument("--experiment", default="cloze")
    parser.add_argument("--margins", default="0.005,0.01,0.02,0.05")
    args = parser.parse_args(argv)
    client = MlflowClient(args.tracking_uri)
    total = all_epochs(client, args.experiment)
    for margin in (float(value) for value in args.margins.split(",")):
        rows = replays(client, args.experiment, margin)
        saved = sum(row.epochs - row.epochs_pruned for row in rows)
        agree = sum(row.chosen == row.chosen_pruned for row in rows)
        print(
            f"\nmargin {margin:g}: the same rate chosen in {agree} of {len(rows)} grids; "
            f"{saved} of {total} fine-tuning epochs saved ({saved / max(total, 1):.0%})"
        )
        columns = ["grid", "chosen", "with the rule", "epochs", "epochs with the rule", "dropped"]
        table = [
            dict(
                zip(
                    columns,
                    (
                        row.group,
                        f"{row.chosen:g}",
                        f"{row.chosen_pruned:g}",
                        row.epochs,
                        row.epochs_pruned,
                        ", ".join(row.dropped) or "none",
                    ),
                    strict=True,
                )
            )
            for row in rows
        ]
        print(markdown_table(table, columns))


if __name__ == "__main__":
    main()
