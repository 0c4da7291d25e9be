"""Inference throughput of several encoders, measured side by side in one process.

Figures from different runs (or machines) do not compare; a ratio measured in one run does. The
encoders take turns, round after round, on the same batch, so a slow spell of a shared machine
falls on all of them; each one's figure is its median round.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch

from flows.downstream.statistics.distill_report import size_outputs
from lightning_modules.models.config import load_encoder_config
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.models.serialization import count_parameters, load_encoder_weights


def inference_tokens_per_second(
    encoders: dict[str, BertEncoder],
    batch_size: int,
    seq_len: int,
    rounds: int = 5,
    forwards_per_round: int = 3,
    seed: int = 0,
) -> dict[str, float]:
    """Tokens/s of each encoder's forward (eval, no autograd) on one random batch, by name."""
    vocab = min(encoder.config.vocab_size for encoder in encoders.values())
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch_size, seq_len), generator=generator)
    mask = torch.ones_like(ids)
    timings: dict[str, list[float]] = {name: [] for name in encoders}
    with torch.inference_mode():
        for encoder in encoders.values():  # warm-up: allocator, kernels, caches
            encoder.eval()(ids, mask)
        for _ in range(rounds):
            for name, encoder in encoders.items():
                started = time.perf_counter()
                for _ in range(forwards_per_round):
                    encoder(ids, mask)
                timings[name].append(time.perf_counter() - started)
    tokens = batch_size * seq_len * forwards_per_round
    return {name: tokens / statistics.median(seconds) for name, seconds in timings.items()}


def measure_sizes(
    teacher_dir: Path, student_dir: Path, batch_size: int, max_length: int
) -> dict[str, Any]:
    """Encoder parameters and inference tokens/s of teacher and student, side by side, now."""
    encoders = {}
    for name, directory in (("teacher", teacher_dir), ("student", student_dir)):
        encoders[name] = BertEncoder(load_encoder_config(directory))
        load_encoder_weights(encoders[name], directory)
    seq_len = min(max_length, *(e.config.max_position_embeddings for e in encoders.values()))
    speed = inference_tokens_per_second(encoders, batch_size, seq_len)
    parameters = {name: count_parameters(encoder) for name, encoder in encoders.items()}
    return {
        **size_outputs(parameters, speed),
        "distill.speed_batch_size": batch_size,
        "distill.speed_seq_len": seq_len,
    }
