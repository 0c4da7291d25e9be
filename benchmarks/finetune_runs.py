"""Fine-tuning runs per CPU-minute on the demo task, and where a run's time goes.

The finetune stage trains many small models (a learning-rate grid and seeds, per arm), so fixed
costs per run (Trainer construction, loaders, loading weights, per-epoch validation, the test
pass) weigh as much as the training steps. This runs the demo's task (`finetune=pydoc_topics`,
bert-tiny) through `flows.downstream.finetuning.recipe.train_once`, as the stage does, with early
stopping off so every run trains the same number of epochs, and reports runs per CPU-minute
(process CPU time: fair on a shared machine) beside a `cProfile` split of one run.

    python -m benchmarks.finetune_runs --runs 4 --epochs 3 [HYDRA OVERRIDE ...]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.finetune_ceiling import demo_task
from flows.downstream.finetuning.recipe import TaskRun


def prepare(work_dir: Path, epochs: int, overrides: Sequence[str] = ()) -> TaskRun:
    """The demo's task as the stage prepares it (a random bert-tiny as the 'pretrained' encoder),
    every run `epochs` long: early stopping off (`patience` = `epochs`); `overrides` of the
    demo's config as demo_task's."""
    run = demo_task(work_dir, "bert-tiny", overrides).run
    fixed = run.settings.model_copy(update={"epochs": epochs, "patience": epochs})
    return replace(run, settings=fixed)


def main() -> None:
    from flows.downstream.finetuning.recipe import train_once

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work-dir", type=Path, default=Path(".cloze/bench"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the demo's config")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    run = prepare(args.work_dir, args.epochs, args.overrides)
    train_once(run, "pretrained", 1e-3, 0)  # warm-up: imports, first-call costs
    wall, cpu = time.perf_counter(), time.process_time()
    scores = [
        train_once(run, "pretrained", 1e-3, seed).validation_score for seed in range(args.runs)
    ]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    profiler = cProfile.Profile()
    profiler.runcall(train_once, run, "pretrained", 1e-3, 0)
    report = io.StringIO()
    pstats.Stats(profiler, stream=report).sort_stats("cumulative").print_stats(40)
    print(report.getvalue())
    train_size = len(run.split("train", 0))
    print(
        f"{args.runs} runs of {args.epochs} epochs x {train_size} examples: "
        f"{60 * args.runs / cpu:.2f} runs per CPU-minute ({cpu / args.runs:.2f} CPU-s a run), "
        f"{60 * args.runs / wall:.2f} per wall minute; validation scores {scores}"
    )


if __name__ == "__main__":
    main()
