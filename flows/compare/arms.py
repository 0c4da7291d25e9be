"""`python -m flows.compare.arms --task T DIR:ARM DIR:ARM`: one arm against another, across runs.

A run's own table pairs its arms by seed; this pairs arms of two runs the same way, for the
questions that take two runs: did the distilled student beat the same student pretrained from
scratch (the DistilBERT claim), did a longer pretraining beat a shorter one? Each side is a
finetune artifact directory (the `path` of the run's finetune stage) and an arm of it
(`pretrained`, `random_init`, `student`). Prints both arms and the first minus the second, paired
by seed, with its t-interval. Reads files only: no tracking server needed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from flows.core.cli import fail
from flows.core.settings import ConfigError
from flows.core.tables import markdown_table
from flows.downstream.statistics.pairing import ArmScores, paired_difference, read_arm
from flows.stages.finetune import RESULTS_FILE


def parse_side(text: str, task: str, metric: str | None) -> ArmScores:
    """`DIR:ARM` (the last colon splits, so a directory may hold colons)."""
    directory, separator, arm = text.rpartition(":")
    if not separator or not directory or not arm:
        raise ConfigError(f"{text!r}: give a finetune artifact directory and an arm as DIR:ARM")
    return read_arm(Path(directory) / RESULTS_FILE, task, arm, metric)


def render(first: ArmScores, second: ArmScores, confidence: float) -> str:
    difference = paired_difference(first, second, confidence)
    header = ["arm", f"{first.task} test {first.metric} (mean ± std)", "seeds"]
    rows = [(side.source, side.summary, str(len(side.by_seed))) for side in (first, second)]
    interval = "" if difference.interval is None else f" [{confidence:.0%} CI, t]"
    return (
        markdown_table(header, rows)
        + f"\n\nfirst - second, paired by seed{interval}: {difference.described}"
    )


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.compare.arms", description=__doc__)
    parser.add_argument("first", help="DIR:ARM, e.g. <store>/finetune/<key>:student")
    parser.add_argument("second", help="DIR:ARM, the arm subtracted from the first")
    parser.add_argument("--task", required=True, help="a task both runs scored, e.g. sst2")
    parser.add_argument("--metric", help="a test metric of the task (default: the task's own)")
    parser.add_argument("--confidence", type=float, default=0.95)
    args = parser.parse_args(argv)
    try:
        if not 0 < args.confidence < 1:
            raise ConfigError(f"--confidence={args.confidence} must lie in (0, 1)")
        first = parse_side(args.first, args.task, args.metric)
        second = parse_side(args.second, args.task, first.metric)
        print(render(first, second, args.confidence))
    except ConfigError as error:
        return fail(error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
