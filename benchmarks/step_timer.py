"""Timing of training steps that holds up on a shared machine, plus a profile of a few steps.

Wall time on a machine shared with other jobs measures the other jobs as much as the path. The
CPU time of the process counts only the time it ran, so tokens per CPU-second (with the same
thread count for every path) compare paths fairly under contention. Both are reported.
"""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl
import torch
from torch.profiler import ProfilerActivity, profile

PROFILE_ROWS = 10


class StepTimer:
    """Times steps [warmup, steps), keeps every step's loss, profiles the steps after `steps`.

    Losses stay tensors until the end: converting each step would be a host sync on a GPU.
    """

    def __init__(self, warmup: int, steps: int, profile_steps: int) -> None:
        self.warmup = warmup
        self.steps = steps
        self.profile_steps = profile_steps
        self.losses: list[torch.Tensor] = []
        self.wall = self.cpu = 0.0
        self.profiler: profile | None = None
        self.top_operators = ""

    @property
    def total_steps(self) -> int:
        return self.steps + self.profile_steps

    def before(self, step: int) -> None:
        if step == self.warmup:
            wait_for_gpu()
            self.wall, self.cpu = -time.perf_counter(), -time.process_time()
        if step == self.steps:
            self._stop_clocks()
            if self.profile_steps:
                self.profiler = profile(activities=[ProfilerActivity.CPU])
                self.profiler.__enter__()

    def after(self, step: int, loss: torch.Tensor) -> None:
        if step < self.steps:
            self.losses.append(loss.detach())
        if step == self.steps - 1 and not self.profile_steps:
            self._stop_clocks()
        if self.profiler is not None and step == self.total_steps - 1:
            self.profiler.__exit__(None, None, None)
            self.top_operators = self.profiler.key_averages().table(
                sort_by="self_cpu_time_total", row_limit=PROFILE_ROWS, max_name_column_width=50
            )
            self.profiler = None

    def _stop_clocks(self) -> None:
        if self.wall < 0:
            wait_for_gpu()
            self.wall += time.perf_counter()
            self.cpu += time.process_time()

    def result(self, tokens_per_step: int) -> dict[str, Any]:
        timed = self.steps - self.warmup
        losses = [float(loss) for loss in self.losses]
        return {
            "tokens_per_s": timed * tokens_per_step / self.wall,
            "tokens_per_cpu_s": timed * tokens_per_step / self.cpu,
            "loss_first": sum(losses[:3]) / 3,
            "loss_last": sum(losses[-5:]) / 5,
            "top_operators": self.top_operators,
        }


class StepTimerCallback(pl.Callback):
    """The same timer inside a Lightning Trainer."""

    def __init__(self, timer: StepTimer) -> None:
        self.timer = timer

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
        self.timer.before(index)

    def on_train_batch_end(
        self, trainer: Any, module: Any, outputs: Any, batch: Any, index: int
    ) -> None:
        self.timer.after(index, outputs["loss"])


def wait_for_gpu() -> None:
    """Steps queue GPU work asynchronously: the clocks must wait for it (no-op on a CPU run)."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def synchronize(device: torch.device | str) -> None:
    """Waits for queued GPU work, so a clock read measures it; nothing to wait for on a CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peaks(size: int = 2048, repeats: int = 5, device: str = "cpu") -> dict[str, float]:
    """fp32 and bf16 (and on CUDA fp16) matmul GFLOP/s, per wall second and per CPU second: the
    MFU denominators."""
    peaks = {}
    dtypes = [("fp32", torch.float32), ("bf16", torch.bfloat16)]
    if device == "cuda":
        size, repeats = 8192, 20  # enough work to fill a data-centre GPU
        dtypes.append(("fp16", torch.float16))  # what 16-mixed runs on a GPU without bf16
    for name, dtype in dtypes:
        a = torch.randn(size, size, dtype=dtype, device=device)
        b = torch.randn(size, size, dtype=dtype, device=device)
        a @ b
        synchronize(device)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(repeats):
            a @ b
        synchronize(device)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        flops = 2 * size**3 * repeats / 1e9
        peaks[name] = flops / wall
        peaks[f"{name}_cpu"] = flops / cpu
    return peaks
