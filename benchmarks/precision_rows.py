"""Which precision rows a benchmark runs on this machine (issue 41).

A bf16 row on a CPU that emulates bf16 (AVX2: a bf16 matmul 60x slower than fp32) measures the
emulation, not Cloze, and can take hours: such rows are skipped with the reason, which the
benchmark prints, as `trainer.precision: auto` would not train in bf16 there either. 16-mixed
rows need CUDA. The decision is the pipeline's own (flows/training/precision_choice.py).
"""

from __future__ import annotations

from flows.training.precision_choice import PrecisionChoice, resolve_precision


def auto_precision(device: str) -> PrecisionChoice:
    """What `trainer.precision: auto` resolves to on `device` (`cpu` or `cuda`) here."""
    return resolve_precision("auto", "gpu" if device == "cuda" else "cpu")


def skip_reason(precision: str, device: str) -> str | None:
    """Why a row in `precision` does not run on `device` here; None when it runs."""
    if precision == "16-mixed" and device != "cuda":
        return "16-mixed needs a CUDA device"
    if precision != "bf16-mixed":
        return None
    choice = auto_precision(device)
    return None if choice.precision == "bf16-mixed" else f"bf16 is not native: {choice.line}"
