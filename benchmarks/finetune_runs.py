"""Fine-tuning runs per CPU-minute on the demo task, and where a run's time goes.

The finetune stage trains many small models (a learning-rate grid and seeds, per arm), so fixed
costs per run (Trainer construction, loaders, loading weights, per-epoch validation, the test
pass) weigh as much as the training steps. This runs the demo's task (`finetune=pydoc_topics`,
bert-tiny) through `flows.downstream.training.recipe.train_once`, as the stage does, with early
stopping off so every run trains the same number of epochs, and reports runs per CPU-minute
(process CPU time: fair on a shared machine) beside a `cProfile` split of one run.

    python -m benchmarks.finetune_runs --runs 4 --epochs 3
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

import torch

from benchmarks.train_throughput import MODELS, VOCAB_SIZE, prepare_shards
from flows.downstream.training.recipe import TaskRun


def prepare(work_dir: Path, epochs: int) -> tuple[TaskRun, Path]:
    """The demo's task spec and recipe; a random bert-tiny saved as the 'pretrained' encoder."""
    from flows.core.artifacts import ArtifactRef
    from flows.core.config import compose_config
    from flows.core.settings import settings_from
    from flows.downstream.settings import FinetuneSettings
    from flows.stages.finetune import prepare_task
    from flows.stages.tokenizer import load_tokenizer
    from flows.training.settings import TrainerSettings
    from lightning_modules.models.config import EncoderConfig
    from lightning_modules.models.heads import BertForMaskedLM
    from lightning_modules.models.serialization import save_masked_lm

    config = compose_config(["finetune=pydoc_topics"])
    finetune = config["finetune"] | {"epochs": epochs, "patience": epochs}
    settings = settings_from(FinetuneSettings, finetune, "finetune")
    trainer = settings_from(TrainerSettings, config["trainer"], "trainer")
    _, tokenizer_dir = prepare_shards(work_dir)
    tokenizer = ArtifactRef("tokenizer", "", tokenizer_dir, {}, True)
    pretrained = work_dir / "finetune-encoder"
    if not pretrained.exists():
        special = load_tokenizer(tokenizer).special
        shape = EncoderConfig(
            vocab_size=VOCAB_SIZE,
            pad_token_id=special.pad,
            **MODELS["bert-tiny"],  # type: ignore[arg-type]
        )
        pretrained.mkdir(parents=True)
        save_masked_lm(BertForMaskedLM(shape), pretrained)
    spec = settings.specs()[0]
    _, run, _ = prepare_task(
        spec,
        settings,
        0,
        tokenizer,
        pretrained,
        trainer,
        work_dir / "finetune-runs",
        lambda task, label: (),
    )
    return run, pretrained


def main() -> None:
    from flows.downstream.training.recipe import train_once

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work-dir", type=Path, default=Path(".cloze/bench"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    run, _ = prepare(args.work_dir, args.epochs)
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
