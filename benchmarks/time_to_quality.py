"""Time to quality (Cramming's measure): held-out MLM loss against training wall time, Cloze's
recipe against `run_mlm.py`'s defaults, on the same shards' text, model shape and threads.

- **Cloze**: the pipeline's own pretraining (the module, masking collator, data module and
  Lightning Trainer of `flows/stages/pretrain.py`) at the run's defaults for `--overrides`: the
  small-budget recipe (lr 2e-3, 10% warmup then linear decay to zero over the budget, no dropout,
  batch 32 x 128, the head only at the masked positions). Its step count is set so the schedule
  ends at the budget, from a short timed calibration.
- **run_mlm.py's defaults**: `transformers`' `Trainer` with `DataCollatorForLanguageModeling`
  (15%), `AutoModelForMaskedLM`'s dense head, lr 5e-5, no warmup, linear decay over 3 epochs,
  batch 8, blocks of 512 tokens (BERT's `model_max_length`) grouped from the same training rows,
  AdamW (0.9, 0.999, 1e-8), no weight decay, dropout 0.1: what a user who runs the script with
  only a model config and the text gets.

Both train the same shape (bert-mini unless `--overrides` says otherwise) in fp32, each in its own
process with `--threads` threads; with `--parallel` the two run at the same time (one core each
on a 2-core machine), which halves the wall time and shares the machine equally. Each is scored on
the same held-out rows, masked once with a fixed seed, by its own MLM loss (mean cross-entropy at
the masked positions); the clock stops while it is scored.

    python -m benchmarks.time_to_quality --budget-minutes 20 --threads 1 --parallel
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from itertools import pairwise
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from benchmarks.common import markdown_table, peak_rss_mb
from benchmarks.step_timer import matmul_peaks
from lightning_modules.flops import mlm_training_flops_per_token

DEFAULT_OVERRIDES = [
    "experiment=domain_lift_general",
    "model=bert-mini",
    "trainer.precision=32-true",
]
EVALUATION_ROWS = 128
EVALUATION_SEED = 4321
REPORT_MINUTES = (5, 10, 20)
MASK_RATE = 0.15
RUN_MLM_BLOCK = 512


class TrainingClock:
    """Training wall time with the scoring pauses taken out; scores at every `every` seconds.

    `score` maps the network to its held-out loss; both paths call `tick` after each step.
    """

    def __init__(self, budget_s: float, every_s: float, score: Callable[[], float]) -> None:
        self.budget_s, self.every_s, self.score = budget_s, every_s, score
        self.started = time.perf_counter()
        self.paused = 0.0
        self.next_mark = 0.0
        self.curve: list[dict[str, float]] = []

    def elapsed(self) -> float:
        return time.perf_counter() - self.started - self.paused

    def tick(self, step: int, tokens: int) -> bool:
        """Scores when a mark is passed; True once the budget is spent."""
        elapsed = self.elapsed()
        if elapsed >= self.next_mark or elapsed >= self.budget_s:
            before = time.perf_counter()
            loss = self.score()
            self.paused += time.perf_counter() - before
            self.curve.append({"seconds": elapsed, "step": step, "tokens": tokens, "loss": loss})
            self.next_mark += self.every_s
        return elapsed >= self.budget_s


def held_out(shard_dir: Path, tokenizer_dir: Path, overrides: list[str]) -> dict[str, torch.Tensor]:
    """The first validation rows, masked once by Cloze's own collator with a fixed seed."""
    from flows.core.artifacts import ArtifactRef
    from flows.stages.collators import make_collator
    from flows.stages.tokenizer import load_tokenizer
    from lightning_modules.data.packed_dataset import PackedSequenceDataset
    from lightning_modules.data.shard_format import ShardIndex

    trained = load_tokenizer(ArtifactRef("tokenizer", "", tokenizer_dir, {}, True))
    rows = PackedSequenceDataset(shard_dir, ShardIndex.load(shard_dir), "validation")
    count = min(EVALUATION_ROWS, len(rows))
    batch = torch.stack([rows[i] for i in range(count)])
    collator = make_collator(plan_for(overrides).pretrain.objective, trained, EVALUATION_SEED)
    masked = collator([row for row in batch])
    return {"input_ids": masked["input_ids"], "labels": masked["labels"]}


def plan_for(overrides: list[str]) -> Any:
    from flows.plan import PipelinePlan
    from flows.resolve import resolve_run

    return PipelinePlan.from_run_config(resolve_run(overrides, until=None).run)


def prepare(work_dir: Path, overrides: list[str]) -> tuple[Path, Path]:
    """Tokenizer and shards by Cloze's own stages (cached in work_dir across runs)."""
    from flows.core.artifacts import ArtifactStore
    from flows.stages.shards.stage import build_shards
    from flows.stages.tokenizer import train_tokenizer

    plan = plan_for(overrides)
    store = ArtifactStore(work_dir)
    tokenizer = train_tokenizer(plan.tokenizer, plan.open_corpus(), store)
    shards = build_shards(plan.shards, plan.open_corpus(), tokenizer, store)
    return shards.path, tokenizer.path


def scorer(
    evaluate: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    module: Any,
    rows: dict[str, torch.Tensor],
) -> Callable[[], float]:
    """The held-out loss in eval mode, in batches of 32, back to train mode after."""

    @torch.no_grad()
    def score() -> float:
        module.eval()
        losses, counts = [], []
        for start in range(0, len(rows["input_ids"]), 32):
            labels = rows["labels"][start : start + 32]
            losses.append(evaluate(rows["input_ids"][start : start + 32], labels))
            counts.append(int((labels != -100).sum()))
        module.train()
        total = sum(counts)
        return float(sum(loss * count for loss, count in zip(losses, counts, strict=True)) / total)

    return score


def run_cloze(
    shard_dir: str,
    tokenizer_dir: str,
    overrides: list[str],
    budget_s: float,
    every_s: float,
    threads: int,
) -> dict[str, Any]:
    """The pipeline's module and Trainer; max_steps from a timed calibration of the same step."""
    from dataclasses import replace

    from flows.core.artifacts import ArtifactRef
    from flows.stages.collators import make_collator
    from flows.stages.init_weights import run_encoder_config
    from flows.stages.pretrain import build_module
    from flows.stages.tokenizer import load_tokenizer
    from flows.training.trainer import make_trainer
    from lightning_modules.data.mlm_datamodule import MaskedLMDataModule

    torch.set_num_threads(threads)
    settings = plan_for(overrides).pretrain
    trained = load_tokenizer(ArtifactRef("tokenizer", "", Path(tokenizer_dir), {}, True))
    config = run_encoder_config(settings.model, trained, None)
    rows = held_out(Path(shard_dir), Path(tokenizer_dir), overrides)

    def fit(total_steps: int, callback: pl.Callback) -> Any:
        pl.seed_everything(settings.seed, verbose=False)
        data = MaskedLMDataModule(
            Path(shard_dir),
            make_collator(settings.objective, trained, settings.seed),
            settings.trainer.batch_size,
            settings.seed,
            max_validation_sequences=0,
        )
        trainer_settings = settings.trainer.model_copy(
            update={"threads": threads, "log_every_steps": 10**6}
        )
        model, module = build_module(
            replace(settings, trainer=trainer_settings), config, data.index.seq_len, total_steps
        )
        trainer = make_trainer(
            trainer_settings,
            Path(tempfile.mkdtemp()),
            [],
            [callback],
            max_steps=total_steps,
            limit_val_batches=0,
            enable_checkpointing=False,
        )
        trainer.fit(module, datamodule=data)
        return model, module, data.index.seq_len

    calibration = StepRate()
    fit(calibration.steps, calibration)
    total_steps = max(10, int(budget_s / calibration.seconds_per_step))
    timed = ClockCallback(budget_s, every_s, rows, settings.trainer.batch_size)
    fit(total_steps, timed)
    flops = mlm_training_flops_per_token(config, rows["input_ids"].shape[1], MASK_RATE)
    return {
        "path": "cloze",
        "flops_per_token": flops,
        "planned_steps": total_steps,
        **timed.result(),
        "peak_rss_mb": peak_rss_mb(),
    }


class StepRate(pl.Callback):
    """Seconds per step over steps 5 to 20, the first ones being slower (allocation, caches)."""

    steps = 20

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == 5:
            self.started = time.perf_counter()
        elif trainer.global_step == self.steps:
            self.seconds_per_step = (time.perf_counter() - self.started) / (self.steps - 5)


class ClockCallback(pl.Callback):
    """The Lightning side of `TrainingClock`: scores the module's own MLM loss."""

    def __init__(
        self, budget_s: float, every_s: float, rows: dict[str, torch.Tensor], batch_size: int
    ) -> None:
        self.budget_s, self.every_s, self.rows, self.batch_size = (
            budget_s,
            every_s,
            rows,
            batch_size,
        )

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        evaluate = lambda ids, labels: module.model(ids, labels).loss  # noqa: E731
        self.clock = TrainingClock(self.budget_s, self.every_s, scorer(evaluate, module, self.rows))

    def on_train_batch_end(
        self, trainer: pl.Trainer, module: pl.LightningModule, *args: Any
    ) -> None:
        step = trainer.global_step
        seq_len = self.rows["input_ids"].shape[1]
        if self.clock.tick(step, step * self.batch_size * seq_len):
            trainer.should_stop = True

    def on_train_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        step = trainer.global_step
        if self.clock.curve[-1]["step"] != step:  # the schedule ended before the budget
            self.clock.next_mark = 0.0
            self.clock.tick(step, step * self.batch_size * self.rows["input_ids"].shape[1])

    def result(self) -> dict[str, Any]:
        return {"curve": self.clock.curve}


def run_mlm_defaults(
    shard_dir: str,
    tokenizer_dir: str,
    overrides: list[str],
    budget_s: float,
    every_s: float,
    threads: int,
) -> dict[str, Any]:
    """run_mlm.py's `Trainer` path at its defaults, on the same training rows."""
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from benchmarks.train_throughput import peer_tokenizer
    from lightning_modules.data.packed_dataset import PackedSequenceDataset
    from lightning_modules.data.shard_format import ShardIndex

    torch.set_num_threads(threads)
    shape = plan_for(overrides).pretrain.model
    tokenizer = peer_tokenizer(Path(tokenizer_dir))
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        intermediate_size=shape.intermediate_size,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(42)  # run_mlm's default seed
    network = BertForMaskedLM(config)
    rows = PackedSequenceDataset(Path(shard_dir), ShardIndex.load(Path(shard_dir)), "train")
    ids = torch.cat([rows[i] for i in range(len(rows))])
    ids = ids[ids != tokenizer.pad_token_id]
    blocks = [
        {"input_ids": block}
        for block in ids[: len(ids) // RUN_MLM_BLOCK * RUN_MLM_BLOCK]
        .view(-1, RUN_MLM_BLOCK)
        .tolist()
    ]
    held = held_out(Path(shard_dir), Path(tokenizer_dir), overrides)
    evaluate = lambda ids, labels: network(input_ids=ids, labels=labels).loss  # noqa: E731
    clock: dict[str, TrainingClock] = {}

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            clock["it"] = TrainingClock(budget_s, every_s, scorer(evaluate, network, held))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step = state.global_step
            if clock["it"].tick(step, step * 8 * RUN_MLM_BLOCK):
                control.should_training_stop = True

    arguments = TrainingArguments(
        output_dir=tempfile.mkdtemp(),
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        seed=42,
        disable_tqdm=True,
    )  # everything else at its default: lr 5e-5, batch 8, 3 epochs, linear, no warmup
    trainer = Trainer(
        model=network,
        args=arguments,
        train_dataset=blocks,
        callbacks=[Clock()],
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15),
    )
    trainer.train()
    curve = clock["it"].curve
    if curve[-1]["step"] != trainer.state.global_step:  # 3 epochs ended before the budget
        clock["it"].next_mark = 0.0
        step = trainer.state.global_step
        clock["it"].tick(step, step * 8 * RUN_MLM_BLOCK)
    return {
        "path": "run_mlm.py defaults",
        "planned_steps": trainer.state.max_steps,
        "curve": curve,
        "peak_rss_mb": peak_rss_mb(),
    }


def loss_at(curve: list[dict[str, float]], seconds: float) -> float:
    """The last score taken at or before `seconds` of training (a run that ended keeps its loss);
    the first score when none was (the clock scores after a step, and a budget shorter than the
    first step, as in the smoke test on a loaded machine, leaves only that one)."""
    scored = [point["loss"] for point in curve if point["seconds"] <= seconds + 1e-6]
    return scored[-1] if scored else curve[0]["loss"]


def time_to_reach(curve: list[dict[str, float]], target: float) -> float | None:
    """Training seconds at which the loss first reaches `target`, interpolated between scores."""
    for before, after in pairwise(curve):
        if after["loss"] <= target:
            if before["loss"] <= target:
                return before["seconds"]
            share = (before["loss"] - target) / (before["loss"] - after["loss"])
            return before["seconds"] + share * (after["seconds"] - before["seconds"])
    return None


def summary(
    results: list[dict[str, Any]], budget_s: float, peak_gflops: float
) -> list[dict[str, Any]]:
    """Per path: its rate, MFU (the FLOPs the objective needs per token, Cloze's count for both:
    a dense head's extra work earns nothing), losses at the report times, and for Cloze the
    minutes it took to reach the peer's loss at the end of the budget."""
    peer = next(r for r in results if r["path"] != "cloze")
    flops = next(r for r in results if r["path"] == "cloze")["flops_per_token"]
    target = loss_at(peer["curve"], budget_s)
    rows = []
    for result in results:
        curve = result["curve"]
        last = curve[-1]
        row = {
            "path": result["path"],
            "steps": last["step"],
            "tokens": last["tokens"],
            "tokens/s": last["tokens"] / last["seconds"],
            "mfu": last["tokens"] / last["seconds"] * flops / (peak_gflops * 1e9),
            "peak_rss_mb": result["peak_rss_mb"],
        }
        for minutes in REPORT_MINUTES:
            if minutes * 60 <= budget_s + 1:
                row[f"loss at {minutes} min"] = loss_at(curve, minutes * 60)
        if result is not peer:
            reached = time_to_reach(curve, target)
            row["minutes to the peer's final loss"] = (
                "not reached" if reached is None else reached / 60
            )
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Runs both paths; returns the summary rows it printed (the smoke test reads them)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget-minutes", type=float, default=20)
    parser.add_argument("--score-every-s", type=float, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--parallel", action="store_true", help="both paths at the same time")
    parser.add_argument("--overrides", default=",".join(DEFAULT_OVERRIDES))
    parser.add_argument("--work-dir", type=Path, default=Path(".cloze/bench-ttq"))
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    overrides = args.overrides.split(",")
    shard_dir, tokenizer_dir = prepare(args.work_dir, overrides)
    torch.set_num_threads(args.threads)
    peaks = matmul_peaks()
    budget = args.budget_minutes * 60
    common = (
        str(shard_dir),
        str(tokenizer_dir),
        overrides,
        budget,
        args.score_every_s,
        args.threads,
    )
    workers = 2 if args.parallel else 1
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(run, *common) for run in (run_mlm_defaults, run_cloze)]
        results = [future.result() for future in futures]
    print(
        f"\nmatmul peak ({args.threads} threads, 2048^3): fp32 {peaks['fp32']:.0f} GFLOP/s; "
        f"budget {args.budget_minutes:g} min per path, {args.threads} thread(s) each, "
        f"{'side by side' if args.parallel else 'one after the other'}; overrides {overrides}\n"
    )
    rows = summary(results, budget, peaks["fp32"])
    print(markdown_table(rows, list(dict.fromkeys(key for row in rows for key in row))))
    if args.output:
        args.output.write_text(json.dumps({"peaks_gflops": peaks, "results": results}, indent=2))
    return rows


if __name__ == "__main__":
    main()
