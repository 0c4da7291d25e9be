"""How far a training stage has come and how long it has left, for a log file and a person.

A log line carries `elapsed=`, `eta=` and `tokens_per_second=` from the first step on, so a log
read hours later says whether the run will take minutes or a night. At a terminal a `tqdm` bar
shows the same: Lightning's own bars count the batches of an epoch, and a pretraining stream's
epoch has no known length, while a stage's plan is its optimizer steps.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytorch_lightning as pl
import torch
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

log = logging.getLogger("cloze.training")
# A fit's first steps carry its warm-up (compilation, allocator and data-loader start, the
# optimizer's state): timed with the rest, they put the first forecast of `make demo` at 8m08s
# for a 2m15s stage. The forecast and every later ETA use the pace after them; a fit shorter
# than twice this (a fine-tuning run of a few steps) has no forecast line, its step lines carry
# the ETA.
WARMUP_STEPS = 10
TIMED_STEPS = 10  # the steps after the warm-up that the forecast is measured over


def duration(seconds: float) -> str:
    """`4h02m`, `3m05s`, `12s`: read at a glance, no false precision."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def batch_tokens(batch: Any) -> int | torch.Tensor:
    """Real tokens in a batch: the attention mask's count where there is padding, else every
    position (packed pretraining). A tensor stays on its device until read."""
    if not isinstance(batch, dict) or "input_ids" not in batch:
        return 0
    mask = batch.get("attention_mask")
    return batch["input_ids"].numel() if mask is None else mask.sum()


def terminal_bars() -> bool:
    """Bars only for a person watching: a log file or an orchestrator gets lines."""
    return sys.stdout.isatty()


def new_bar(total: int, label: str, unit: str, initial: int = 0) -> tqdm:
    """A bar on stdout sized to the terminal; a terminal that reports no size (a pseudo-terminal
    without a window size, as `script` makes) gets $COLUMNS x $LINES or 80 x 24: tqdm would
    take it for zero rows and draw nothing."""
    size = shutil.get_terminal_size()
    return tqdm(
        total=total,
        initial=initial,
        desc=label,
        unit=unit,
        file=sys.stdout,
        ncols=size.columns,
        nrows=size.lines,
    )


class StepClock:
    """Wall time and tokens since the first step of this fit (a resumed fit starts its own
    clock at the step it resumed from). The ETA is the steps left at the pace since the warm-up
    steps ended, or, until then, at the pace so far."""

    def __init__(
        self, first_step: int, total_steps: int, now: Callable[[], float] = time.perf_counter
    ) -> None:
        self.first_step, self.total_steps, self.now = first_step, total_steps, now
        self.started = now()
        self.warmed: float | None = None  # when the warm-up steps ended
        self.tokens: int | torch.Tensor = 0

    def elapsed(self) -> float:
        return self.now() - self.started

    def step_done(self, step: int) -> None:
        if step == self.first_step + WARMUP_STEPS:
            self.warmed = self.elapsed()

    def eta(self, step: int) -> float:
        if self.warmed is not None and step > self.first_step + WARMUP_STEPS:
            pace = (self.elapsed() - self.warmed) / (step - self.first_step - WARMUP_STEPS)
        else:
            pace = self.elapsed() / max(step - self.first_step, 1)
        return pace * max(self.total_steps - step, 0)

    def tokens_per_second(self) -> float:
        return float(self.tokens) / max(self.elapsed(), 1e-9)

    def figures(self, step: int) -> str:
        return (
            f"elapsed={duration(self.elapsed())} eta={duration(self.eta(step))} "
            f"tokens_per_second={self.tokens_per_second():.4g}"
        )


def planned_steps(trainer: pl.Trainer) -> int:
    """`max_steps`, or the epochs' batches over the accumulation (fine-tuning runs by epochs)."""
    if trainer.max_steps > 0:
        return trainer.max_steps
    return int(trainer.estimated_stepping_batches)


class ProgressLog(pl.Callback):
    """The stage's plan when it starts, its duration once the first steps are timed, then one
    line every `every_steps` optimizer steps (and the first and last), with a bar at a terminal.

    `tokens_per_step` (all ranks) states the plan's tokens; None where batches vary (padded
    fine-tuning), whose tokens are counted as they come. Add it on rank zero only.
    """

    def __init__(
        self,
        every_steps: int,
        label: str,
        tokens_per_step: int | None = None,
        bar: bool | None = None,
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.every_steps, self.label, self.tokens_per_step = every_steps, label, tokens_per_step
        self.bar_wanted = terminal_bars() if bar is None else bar
        self.now = now
        self.clock = StepClock(0, 0, now)
        self.bar: tqdm | None = None
        self.last_step = 0
        self.resources = ExitStack()

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        total, step = planned_steps(trainer), trainer.global_step
        self.clock, self.last_step = StepClock(step, total, self.now), step
        tokens = "" if self.tokens_per_step is None else self.plan_tokens(total - step)
        resumed = f", resuming at step {step}" if step else ""
        log.info("%s plan: %d steps%s%s", self.label, total - step, tokens, resumed)
        if self.bar_wanted:
            self.resources.enter_context(logging_redirect_tqdm())  # lines print above the bar
            self.bar = self.resources.enter_context(new_bar(total, self.label, "step", step))

    def plan_tokens(self, steps: int) -> str:
        assert self.tokens_per_step is not None
        return f" x {self.tokens_per_step:,} tokens = {steps * self.tokens_per_step / 1e6:.3g} M"

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
    ) -> None:
        self.clock.tokens += batch_tokens(batch) * trainer.world_size  # each rank's equal block
        step = trainer.global_step
        if step == self.last_step:  # a micro-batch of a step still accumulating
            return
        self.last_step = step
        self.clock.step_done(step)
        done = step - self.clock.first_step
        if done == WARMUP_STEPS + TIMED_STEPS and step < self.clock.total_steps:
            self.log_timed_plan(step)
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix(tokens_per_second=f"{self.clock.tokens_per_second():,.0f}")
        if done == 1 or step % self.every_steps == 0 or step == self.clock.total_steps:
            self.log_step(trainer, step)

    def log_timed_plan(self, step: int) -> None:
        """The stage's expected duration, from the pace after the warm-up, which it names."""
        clock = self.clock
        assert clock.warmed is not None  # the warm-up steps are behind
        first = clock.first_step + WARMUP_STEPS
        log.info(
            "%s: steps %d-%d took %s, after %d warm-up steps (%s): expect about %s for all %d",
            self.label,
            first + 1,
            step,
            duration(clock.elapsed() - clock.warmed),
            WARMUP_STEPS,
            duration(clock.warmed),
            duration(clock.elapsed() + clock.eta(step)),
            clock.total_steps - clock.first_step,
        )

    def log_step(self, trainer: pl.Trainer, step: int) -> None:
        metrics = trainer.callback_metrics
        shown = " ".join(
            f"{name.split('/')[-1]}={float(value):.4g}"
            for name, value in sorted(metrics.items())
            # The module's tokens/s is a window's, logged to the tracker; the line's is the
            # fit's, the pace its ETA assumes.
            if name.startswith("train/") and name != "train/tokens_per_second"
        )
        log.info(
            "%s step %d/%d %s %s",
            self.label,
            step,
            self.clock.total_steps,
            self.clock.figures(step),
            shown,
        )

    def on_train_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self.close()

    def on_exception(
        self, trainer: pl.Trainer, module: pl.LightningModule, exception: BaseException
    ) -> None:
        self.close()

    def close(self) -> None:
        self.resources.close()
        self.bar = None


class RunsProgress:
    """A grid of runs (learning rates x seeds) as a whole: a line per finished run with the
    grid's elapsed time and ETA, and a bar over the runs at a terminal.

    While its bar is up, every line goes through tqdm, as within a fit: a line logged between
    fits (a run's plan, a finished run) ran on from the bar's row, and the bar, drawn again
    below it, showed twice.
    """

    def __init__(self, label: str, total: int, bar: bool | None = None) -> None:
        self.label, self.total, self.done = label, total, 0
        self.started = time.perf_counter()
        wanted = terminal_bars() if bar is None else bar
        self.resources = ExitStack()
        self.bar: tqdm | None = None
        if wanted:
            self.resources.enter_context(logging_redirect_tqdm())
            self.bar = self.resources.enter_context(new_bar(total, label, "run"))

    def finished(self, run: str) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.started
        eta = elapsed / self.done * (self.total - self.done)
        if self.bar is not None:
            self.bar.update(1)
        log.info(
            "%s run %d/%d done (%s) elapsed=%s eta=%s",
            self.label,
            self.done,
            self.total,
            run,
            duration(elapsed),
            duration(eta),
        )

    def grow(self, runs: int) -> None:
        """`runs` more to do than planned (a grid extended past the end validation chose)."""
        self.total += runs
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def close(self) -> None:
        self.resources.close()
        self.bar = None


@contextmanager
def runs_progress(label: str, total: int) -> Iterator[RunsProgress]:
    progress = RunsProgress(label, total)
    try:
        yield progress
    finally:
        progress.close()
