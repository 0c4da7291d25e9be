"""A training stage says how far it has come and how long it has left, from its first step."""

from __future__ import annotations

import logging
import re
import sys

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from lightning_modules.progress import ProgressLog, RunsProgress, duration
from tests.fakes import FakeClock

STEP_LINE40 = re.compile(r"toy step (\d+)/40 elapsed=\S+ eta=(\S+) ")
STEP_LINE = re.compile(
    r"toy step (\d+)/12 elapsed=\S+ eta=(\S+) tokens_per_second=([\d.e+]+) loss=[\d.]+"
)


class Toy(pl.LightningModule):
    """A one-parameter model over batches shaped like the pipeline's (`input_ids`)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = (self.weight * batch["input_ids"].float().mean()) ** 2
        self.log("train/loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(progress: ProgressLog, accumulate: int = 1) -> None:
    batches = [{"input_ids": torch.ones(4, 8, dtype=torch.long)} for _ in range(12 * accumulate)]
    trainer = pl.Trainer(
        max_steps=12,
        accumulate_grad_batches=accumulate,
        callbacks=[progress],
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(Toy(), DataLoader(batches, batch_size=None))


def test_every_step_line_carries_elapsed_eta_and_tokens_per_second_from_the_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="cloze.training"):
        fit(ProgressLog(every_steps=5, label="toy", tokens_per_step=64, bar=False), accumulate=2)
    messages = [r.getMessage() for r in caplog.records if r.name == "cloze.training"]
    assert messages[0] == "toy plan: 12 steps x 64 tokens = 0.000768 M"
    steps = [match for line in messages if (match := STEP_LINE.fullmatch(line))]
    assert [int(match[1]) for match in steps] == [1, 5, 10, 12]  # the first, every 5th, the last
    assert steps[-1][2] == "0s"  # nothing left at the end
    # Two micro-batches of 4 x 8 real tokens per step.
    assert all(float(match[3]) > 0 for match in steps)
    assert not [line for line in messages if "expect about" in line]  # too short to forecast


class SlowStart(Toy):
    """Steps that take `seconds[step]` on a fake clock: a warm-up, then the steady pace."""

    def __init__(self, clock: FakeClock, seconds: list[float]) -> None:
        super().__init__()
        self.clock, self.seconds = clock, seconds

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.clock.sleep(self.seconds[self.global_step])
        return super().training_step(batch, batch_idx)


def test_the_forecast_leaves_the_warm_up_out_and_says_so(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """`make demo` forecast 8m08s from its first 10 steps, which carry the warm-up, for a stage
    that took 2m15s; its step-1 line said eta=2m45s (issue 53, case 16). Here step 1 takes
    0.1 s, steps 2-10 1 s each, every later step 0.1 s: 12.1 s in all."""
    seconds = [0.1] + [1.0] * 9 + [0.1] * 30
    batches = [{"input_ids": torch.ones(4, 8, dtype=torch.long)} for _ in seconds]
    trainer = pl.Trainer(
        max_steps=len(seconds),
        callbacks=[ProgressLog(every_steps=10, label="toy", bar=False, now=clock)],
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    with caplog.at_level(logging.INFO, logger="cloze.training"):
        trainer.fit(SlowStart(clock, seconds), DataLoader(batches, batch_size=None))  # type: ignore[arg-type]
    messages = [r.getMessage() for r in caplog.records if r.name == "cloze.training"]
    [forecast] = [line for line in messages if "expect about" in line]
    assert forecast == (
        "toy: steps 11-20 took 1s, after 10 warm-up steps (9s): expect about 12s for all 40"
    )
    etas = {int(match[1]): match[2] for line in messages if (match := STEP_LINE40.match(line))}
    assert etas == {1: "4s", 10: "27s", 20: "2s", 30: "1s", 40: "0s"}


def test_at_a_terminal_a_bar_shows_steps_eta_and_tokens_per_second(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fit(ProgressLog(every_steps=5, label="toy", bar=True))
    bar = capsys.readouterr().out
    assert "toy: 100%" in bar and "12/12" in bar and "tokens_per_second=" in bar
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", bar)  # tqdm's elapsed<remaining


def test_a_grid_of_runs_reports_each_finished_run_with_its_eta(
    caplog: pytest.LogCaptureFixture,
) -> None:
    progress = RunsProgress("finetune/toy/pretrained grid", total=3, bar=False)
    with caplog.at_level(logging.INFO, logger="cloze.training"):
        for seed in range(3):
            progress.finished(f"seed {seed}")
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0].startswith("finetune/toy/pretrained grid run 1/3 done (seed 0) elapsed=")
    assert lines[-1].endswith("eta=0s")


def test_at_a_terminal_a_grid_shows_a_bar_over_its_runs(capsys: pytest.CaptureFixture[str]) -> None:
    progress = RunsProgress("finetune/toy/pretrained grid", total=2, bar=True)
    progress.finished("seed 0")
    progress.finished("seed 1")
    progress.close()
    assert "finetune/toy/pretrained grid: 100%" in capsys.readouterr().out


def screen(output: str) -> list[str]:
    """The rows a terminal shows for `output`: a carriage return goes back to the row's start,
    a newline to the next row, tqdm's cursor-up (a nested bar) to the row above; each write
    overwrites what is there. Blank rows left out."""
    rows: list[list[str]] = [[]]
    row = column = 0
    for token in re.split(r"(\r|\n|\x1b\[A)", output):
        if token == "\r":
            column = 0
        elif token == "\n":
            row, column = row + 1, 0
        elif token == "\x1b[A":
            row = max(row - 1, 0)
        else:
            rows.extend([] for _ in range(row + 1 - len(rows)))
            line = rows[row]
            line.extend(" " for _ in range(column + len(token) - len(line)))
            line[column : column + len(token)] = token
            column += len(token)
    return [text for line in rows if (text := "".join(line).rstrip())]


def test_at_a_terminal_a_grid_prints_each_line_on_its_own_row_and_each_bar_once(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A line logged while the grid's bar is up (a fit's plan, a finished run) went out under
    the bar, not through tqdm: it ran on from the bar's row, and the bar, drawn again below it,
    showed twice."""
    console = logging.StreamHandler(sys.stdout)  # a person's console, as setup_logging's
    console.addFilter(logging.Filter("cloze"))  # our lines, not Lightning's
    logging.getLogger().addHandler(console)
    progress = RunsProgress("toy grid", total=1, bar=True)
    try:
        with caplog.at_level(logging.INFO, logger="cloze.training"):
            fit(ProgressLog(every_steps=5, label="toy", bar=True))
            progress.finished("seed 0")
    finally:
        progress.close()
        logging.getLogger().removeHandler(console)
    rows = screen(capsys.readouterr().out)
    assert "toy plan: 12 steps" in rows
    assert [row for row in rows if row.startswith("toy grid run 1/1 done (seed 0) elapsed=")]
    assert len([row for row in rows if row.startswith("toy grid: 100%")]) == 1, rows
    assert len([row for row in rows if row.startswith("toy: 100%")]) == 1, rows
    assert len([row for row in rows if row.startswith("toy step 1/12 ")]) == 1, rows


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0s"), (59, "59s"), (185, "3m05s"), (4 * 3600 + 130, "4h02m")]
)
def test_durations_read_at_a_glance(seconds: float, text: str) -> None:
    assert duration(seconds) == text
