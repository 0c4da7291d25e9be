"""What the device a run trains on computes natively, for `trainer.precision: auto`.

On a CPU that emulates bf16 (AVX2, no AVX512_BF16 or AMX) a bf16 matmul ran 60x slower than
fp32 (0.8 against 48.9 GFLOP/s, 1024^3, 2 threads, an AMD Zen 3; issue 41), so bf16 autocast
there turns a 7-minute demo into hours. On Linux x86 the CPU's flags in /proc/cpuinfo say it
(the flags torch's cpuinfo and oneDNN read): reading them needs no torch, which a served run must
not import before its first stage (docs/architecture.md). A CUDA device is asked through torch.
Where neither can tell (another OS or architecture), and for the slowdown an explicit bf16 run is
warned of, a timed matmul in each dtype decides, cached per machine in the artifact store.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

from flows.core.artifacts import ArtifactStore, stage_key

CPUINFO = Path("/proc/cpuinfo")
# x86 flags of native bf16 arithmetic: AVX512_BF16 (Zen 4, Cooper Lake) and AMX (Sapphire Rapids).
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
PROBE_STAGE = "machine_probe"
PROBE_VERSION = 1
PROBE_SIZE = 512  # 0.27 GFLOP a matmul: 0.3 s in emulated bf16, milliseconds where native


@dataclass(frozen=True)
class Hardware:
    """The device a run trains on: its kind (`cpu`, `cuda`, or another Lightning accelerator),
    whether it computes bf16 natively (None: what it reports cannot tell; a timed probe decides),
    and how the log names it (`AVX2`, `AVX512 with avx512_bf16`, `Tesla V100 (sm_70)`)."""

    device: str
    bf16_native: bool | None
    name: str


@dataclass(frozen=True)
class MatmulRates:
    """GFLOP/s of one square matmul in fp32 and in bf16 on the device (the probe's figures)."""

    fp32: float
    bf16: float

    @property
    def bf16_slowdown(self) -> float:
        """How many times slower bf16 is than fp32 (below 1: faster)."""
        return self.fp32 / self.bf16


def cpu_hardware(cpuinfo: str | None) -> Hardware:
    """A CPU as its /proc/cpuinfo text describes it; no x86 flags there: undecided."""
    flags = x86_flags(cpuinfo or "")
    if not flags:
        return Hardware("cpu", None, platform.machine() or "this CPU")
    isa = "AVX512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    native = [flag for flag in NATIVE_BF16_FLAGS if flag in flags]
    return Hardware("cpu", bool(native), f"{isa} with {', '.join(native)}" if native else isa)


def x86_flags(cpuinfo: str) -> set[str]:
    """The first processor's `flags` line (x86 Linux); empty where there is none."""
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return set(value.split())
    return set()


def read_cpuinfo() -> str | None:
    try:
        return CPUINFO.read_text(errors="replace")
    except OSError:  # not Linux
        return None


def cuda_hardware() -> Hardware:
    """The current CUDA device; bf16 counts only where computed natively (compute capability 8.0
    on: torch's default answer also counts emulation, which is slow)."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    native = torch.cuda.is_bf16_supported(including_emulation=False)
    return Hardware("cuda", native, f"{torch.cuda.get_device_name()} (sm_{major}{minor})")


@cache
def detect_hardware(accelerator: str) -> Hardware:
    """The device `trainer.accelerator` trains on. Only `gpu`, `cuda` and `auto` import torch
    (to ask CUDA); a CPU is read from its flags. Memoised: the machine does not change mid-run."""
    if trains_on_cuda(accelerator):
        return cuda_hardware()
    if accelerator in ("cpu", "auto"):
        return cpu_hardware(read_cpuinfo())
    return Hardware(accelerator, None, accelerator)


def trains_on_cuda(accelerator: str) -> bool:
    """Whether `trainer.accelerator` trains on a CUDA device: `gpu` and `cuda` do, and `auto`
    where one is present. The one reading of it: the precision's resolver and the autocast of a
    mixed-precision Trainer (flows/training/precision.py) agree on the device."""
    return accelerator in ("gpu", "cuda") or (accelerator == "auto" and cuda_available())


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def measure_matmul(device: str, size: int = PROBE_SIZE, repeats: int = 3) -> MatmulRates:
    """fp32 and bf16 GFLOP/s of a `size`^3 matmul on `device`, each after one untimed run."""
    import torch

    rates = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a = torch.randn(size, size, dtype=dtype, device=device)
        b = torch.randn(size, size, dtype=dtype, device=device)
        a @ b
        synchronize(torch, device)
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        synchronize(torch, device)
        rates[name] = 2 * size**3 * repeats / 1e9 / (time.perf_counter() - start)
    return MatmulRates(**rates)


def synchronize(torch: Any, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def machine_record(hardware: Hardware) -> dict[str, Any]:
    """What the probe's figures depend on: the machine, its device and the torch build."""
    cpu_models = [
        line.partition(":")[2].strip()
        for line in (read_cpuinfo() or "").splitlines()
        if line.startswith("model name")
    ]
    return {
        "node": platform.node(),
        "machine": platform.machine(),
        "processor": cpu_models[0] if cpu_models else platform.processor(),
        "device": hardware.device,
        "device_name": hardware.name,
        "torch": version("torch"),
    }


def probed_rates(hardware: Hardware, store: ArtifactStore | None) -> MatmulRates:
    """The probe's figures for this machine: measured once, then read from `store` (every
    later run on the same machine and torch); measured every time without a store."""
    device = "cuda" if hardware.device == "cuda" else "cpu"
    if store is None:
        return measure_matmul(device)
    settings = machine_record(hardware)
    key = stage_key(PROBE_STAGE, PROBE_VERSION, settings, {})

    def build(directory: Path) -> dict[str, Any]:
        rates = measure_matmul(device)
        return {"fp32_gflops": rates.fp32, "bf16_gflops": rates.bf16}

    record = {"settings": settings, "inputs": {}}
    outputs = store.get_or_build(PROBE_STAGE, key, build, record).outputs
    return MatmulRates(outputs["fp32_gflops"], outputs["bf16_gflops"])
