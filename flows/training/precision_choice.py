"""`trainer.precision: auto`, resolved once per run from the hardware (flows/training/hardware.py),
by the run's plan (flows/plan.py `resolved_trainer`); the stages read what it resolved.

- CUDA: bf16-mixed where the GPU computes bf16 natively, else 16-mixed (fp16 with a gradient
  scaler: V100, T4).
- CPU: bf16-mixed only where bf16 is native (AVX512_BF16 or AMX), else 32-true: emulated bf16
  matmul is 60x slower than fp32 on an AVX2 CPU.
- An explicit value runs as asked; an explicit bf16-mixed on hardware without native bf16 gets
  one warning with the slowdown a timed matmul measured.

The resolved value, never `auto`, is what the pretrain, distill and finetune keys hold, so a
store shared by two kinds of machine never holds fp32 and bf16 weights under one key, and the
keys of runs on native-bf16 machines (bf16-mixed, the default before `auto`) did not move.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from flows.core.artifacts import ArtifactStore
from flows.core.settings import ConfigError
from flows.training.hardware import Hardware, MatmulRates, detect_hardware, probed_rates


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a run trains in, why, and the one warning an explicit slow choice gets."""

    precision: str
    reason: str
    warning: str | None = None

    @property
    def line(self) -> str:
        """The run's first log line about it: `precision 32-true: this CPU computes bf16 in
        software (AVX2)`."""
        return f"precision {self.precision}: {self.reason}"

    @property
    def params(self) -> dict[str, str]:
        """The run's params beside `trainer.precision` as configured (`auto`): what it resolved
        to, and why."""
        return {
            "trainer.precision_resolved": self.precision,
            "trainer.precision_reason": self.reason,
        }

    def report(self, log: logging.Logger) -> None:
        """The run's line about it, first; an explicit bf16 on hardware that emulates it adds
        one warning with the measured slowdown."""
        log.info(self.line)
        if self.warning:
            log.warning(self.warning)


def refuse_fp16_off_cuda(requested: str, device: str, where: str) -> None:
    """The one home of the rule that 16-mixed (fp16 autocast with a gradient scaler) trains on
    CUDA only: checked as configured (`trainer.accelerator=cpu`, `where`) and on the device a run
    resolves on."""
    if requested == "16-mixed" and device != "cuda":
        raise ConfigError(
            "trainer.precision=16-mixed needs a CUDA GPU (fp16 autocast with a gradient scaler), "
            f"but {where}: use trainer.precision=auto or 32-true"
        )


def choose_precision(
    requested: str, hardware: Hardware, rates: Callable[[], MatmulRates]
) -> PrecisionChoice:
    """`requested` (`trainer.precision`) on `hardware`; `rates` (the timed probe) is called only
    when the hardware cannot tell, or to measure the slowdown an explicit bf16 run is warned of."""
    native = hardware.bf16_native
    if native is None:
        native = rates().bf16_slowdown <= 1.0  # native bf16 units are at least as fast as fp32
    device = "GPU" if hardware.device == "cuda" else "CPU" if hardware.device == "cpu" else "device"
    fallback = "16-mixed" if hardware.device == "cuda" else "32-true"
    refuse_fp16_off_cuda(
        requested, hardware.device, f"this run trains on {hardware.device} ({hardware.name})"
    )
    if requested != "auto":
        warning = None
        if requested == "bf16-mixed" and not native:
            measured = rates()
            slowdown = measured.bf16_slowdown
            speed = f"{slowdown:.0f}x slower than" if slowdown >= 1 else "not slower than"
            warning = (
                f"trainer.precision=bf16-mixed on a {device} that computes bf16 in software "
                f"({hardware.name}): a bf16 matmul measured {speed} fp32 here "
                f"({measured.bf16:.1f} against {measured.fp32:.1f} GFLOP/s); "
                f"trainer.precision=auto would train in {fallback}"
            )
        return PrecisionChoice(requested, f"as set (trainer.precision={requested})", warning)
    if native:
        return PrecisionChoice(
            "bf16-mixed", f"this {device} computes bf16 natively ({hardware.name})"
        )
    if hardware.device == "cuda":
        return PrecisionChoice(
            "16-mixed",
            f"this GPU has no native bf16 ({hardware.name}): fp16 autocast with a gradient scaler",
        )
    return PrecisionChoice("32-true", f"this {device} computes bf16 in software ({hardware.name})")


def resolve_precision(
    requested: str,
    accelerator: str,
    store: ArtifactStore | None = None,
    hardware: Hardware | None = None,
) -> PrecisionChoice:
    """`requested` on the hardware of `accelerator` (detected unless given: tests inject it); a
    probe the choice needs is cached in `store` when given."""
    device = hardware or detect_hardware(accelerator)
    return choose_precision(requested, device, lambda: probed_rates(device, store))
