"""Which precision rows a benchmark runs on this machine (issue 41).

A bf16 row on a CPU that emulates bf16 (AVX2: a bf16 matmul 60x slower than fp32) measures the
emulation, not Cloze, and can take hours: such rows are skipped with the reason, which the
benchmark prints, as `trainer.precision: auto` would not train in bf16 there either. 16-mixed
rows need CUDA. Both decisions are the pipeline's own: `auto` is resolved as a run's plan resolves
it (flows/plan.py `resolved_trainer`, the one caller of the resolver), and the CUDA rule is read
from its one home (flows/training/precision_choice.py `refuse_fp16_off_cuda`).
"""

from __future__ import annotations

from flows.core.settings import ConfigError
from flows.plan import resolved_trainer
from flows.training.precision_choice import PrecisionChoice, refuse_fp16_off_cuda
from flows.training.settings import TrainerSettings


def auto_precision(device: str) -> PrecisionChoice:
    """What `trainer.precision: auto` resolves to on `device` (`cpu` or `cuda`) here."""
    return resolved_trainer(TrainerSettings(accelerator="gpu" if device == "cuda" else "cpu"))[1]


def skip_reason(precision: str, device: str) -> str | None:
    """Why a row in `precision` does not run on `device` here; None when it runs."""
    try:
        refuse_fp16_off_cuda(precision, device, f"this row runs on {device}")
    except ConfigError as refused:
        return str(refused)
    if precision != "bf16-mixed":
        return None
    choice = auto_precision(device)
    return None if choice.precision == "bf16-mixed" else f"bf16 is not native: {choice.line}"
