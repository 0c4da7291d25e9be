"""CPU cost per token of the pretraining recipe's speed factors, measured interleaved.

The machine this was written on is shared, so wall-clock rates drift with the neighbours' load.
Each variant runs a short burst of training steps in turn (A, B, C, A, B, C, ...) on one thread,
timed by this process's CPU time, so every variant sees the same drift and the figure is CPU
seconds per million tokens (the "per CPU-minute" of the recipe search), not wall time.

    python -m benchmarks.recipe_speed --rounds 5 --steps 10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from dataclasses import dataclass

import torch

from benchmarks.precision_rows import skip_reason
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.optim import build_optimizer
from lightning_modules.optim_settings import OptimizerSettings


@dataclass(frozen=True)
class Variant:
    name: str
    batch_size: int = 32
    seq_len: int = 128
    vocab_size: int = 8000
    mask_rate: float = 0.15
    bf16: bool = False
    norm_placement: str = "post"


VARIANTS = (
    Variant("base bs32 seq128 vocab8000 fp32"),
    Variant("bf16-mixed", bf16=True),
    Variant("batch 16", batch_size=16),
    Variant("batch 64", batch_size=64),
    Variant("batch 128", batch_size=128),
    Variant("seq 64 (batch 64)", seq_len=64, batch_size=64),
    Variant("seq 256 (batch 16)", seq_len=256, batch_size=16),
    Variant("vocab 4000", vocab_size=4000),
    Variant("vocab 16000", vocab_size=16000),
    Variant("mask 0.30", mask_rate=0.30),
    Variant("mask 0.40", mask_rate=0.40),
    Variant("pre-LN", norm_placement="pre"),
)


class Runner:
    """One variant's model, optimizer and fixed random batch (content does not change cost)."""

    def __init__(self, variant: Variant) -> None:
        self.variant = variant
        config = EncoderConfig(
            vocab_size=variant.vocab_size,
            dropout=0.0,
            attention_dropout=0.0,
            norm_placement=variant.norm_placement,
        )
        self.model = BertForMaskedLM(config)
        self.optimizer, _ = build_optimizer(
            self.model, OptimizerSettings(learning_rate=1e-3, warmup_steps=0)
        )
        generator = torch.Generator().manual_seed(0)
        shape = (variant.batch_size, variant.seq_len)
        self.input_ids = torch.randint(5, variant.vocab_size, shape, generator=generator)
        masked = torch.rand(shape, generator=generator) < variant.mask_rate
        self.labels = torch.where(masked, self.input_ids, torch.full_like(self.input_ids, -100))
        self.cpu_seconds = 0.0
        self.wall_seconds = 0.0
        self.tokens = 0

    def burst(self, steps: int) -> None:
        started, wall_started = time.process_time(), time.perf_counter()
        for _ in range(steps):
            autocast = (
                torch.autocast("cpu", dtype=torch.bfloat16)
                if self.variant.bf16
                else contextlib.nullcontext()
            )
            with autocast:
                loss = self.model(self.input_ids, self.labels).loss
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.cpu_seconds += time.process_time() - started
        self.wall_seconds += time.perf_counter() - wall_started
        self.tokens += steps * self.variant.batch_size * self.variant.seq_len


def burst_steps(variant: Variant, base_steps: int) -> int:
    """Steps that train as many tokens as `base_steps` of batch 32 x 128, so bursts match."""
    return max(1, base_steps * 32 * 128 // (variant.batch_size * variant.seq_len))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="steps per burst (bs32-equivalent)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads; above 1, CPU time counts the threads' spin-waits too",
    )
    parser.add_argument("--only", default="", help="comma-separated variant names (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    chosen = set(filter(None, args.only.split(",")))
    variants = [v for v in VARIANTS if not chosen or v.name in chosen or v is VARIANTS[0]]
    bf16_skipped = skip_reason("bf16-mixed", "cpu")
    if bf16_skipped:  # an emulated bf16 burst would take minutes and measure the emulation
        print(f"skipped the bf16 variants: {bf16_skipped}")
    runners = [Runner(v) for v in variants if not (v.bf16 and bf16_skipped)]
    for runner in runners:  # warm-up burst, not timed
        runner.burst(2)
        runner.cpu_seconds, runner.wall_seconds, runner.tokens = 0.0, 0.0, 0
    for _ in range(args.rounds):
        for runner in runners:
            runner.burst(burst_steps(runner.variant, args.steps))
    base = runners[0].cpu_seconds / runners[0].tokens
    for runner in runners:
        per_token = runner.cpu_seconds / runner.tokens
        print(
            json.dumps(
                {
                    "variant": runner.variant.name,
                    "cpu_seconds_per_million_tokens": round(per_token * 1e6, 2),
                    "relative_cost": round(per_token / base, 3),
                    "wall_seconds_per_million_tokens": round(
                        runner.wall_seconds / runner.tokens * 1e6, 2
                    ),
                    "tokens": runner.tokens,
                    "threads": args.threads,
                }
            )
        )


if __name__ == "__main__":
    main()
