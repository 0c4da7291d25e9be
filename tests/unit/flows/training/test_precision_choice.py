"""`trainer.precision: auto` resolves from the hardware (flows/training/precision_choice.py).

Each branch of the choice runs with the hardware and the timed probe injected: which machine the
tests run on must not decide which branches are covered (issue 41: CUDA with and without native
bf16, a CPU with and without). Detection itself is checked on /proc/cpuinfo texts of each kind.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from flows.core.artifacts import ArtifactStore
from flows.core.config import compose_config
from flows.core.settings import ConfigError
from flows.plan import PipelinePlan
from flows.training.hardware import Hardware, MatmulRates, cpu_hardware, probed_rates
from flows.training.precision_choice import choose_precision
from tests.fakes import EMULATED_BF16_CPU, NATIVE_BF16_CPU

A100 = Hardware("cuda", True, "NVIDIA A100 (sm_80)")
V100 = Hardware("cuda", False, "Tesla V100 (sm_70)")
UNKNOWN_CPU = Hardware("cpu", None, "aarch64")
# Zen 3 in issue 41: bf16 0.8 against fp32 48.9 GFLOP/s (1024^3, 2 threads).
EMULATED_RATES = MatmulRates(fp32=48.9, bf16=0.8)
NATIVE_RATES = MatmulRates(fp32=155.7, bf16=426.6)


def never_probed() -> MatmulRates:
    raise AssertionError("the hardware said enough: no probe should run")


def test_a_cuda_gpu_with_native_bf16_trains_in_bf16() -> None:
    choice = choose_precision("auto", A100, never_probed)
    assert choice.precision == "bf16-mixed"
    assert (
        choice.line == "precision bf16-mixed: this GPU computes bf16 natively (NVIDIA A100 (sm_80))"
    )


def test_a_cuda_gpu_without_bf16_trains_in_fp16_with_a_scaler() -> None:
    choice = choose_precision("auto", V100, never_probed)
    assert choice.precision == "16-mixed"
    assert "no native bf16 (Tesla V100 (sm_70))" in choice.reason
    assert choice.warning is None


def test_a_cpu_with_native_bf16_trains_in_bf16() -> None:
    choice = choose_precision("auto", NATIVE_BF16_CPU, never_probed)
    assert choice.precision == "bf16-mixed"
    assert choice.warning is None


def test_a_cpu_that_emulates_bf16_trains_in_fp32_and_says_why() -> None:
    choice = choose_precision("auto", EMULATED_BF16_CPU, never_probed)
    assert choice.line == "precision 32-true: this CPU computes bf16 in software (AVX2)"
    assert choice.warning is None


@pytest.mark.parametrize(
    ("rates", "chosen"), [(EMULATED_RATES, "32-true"), (NATIVE_RATES, "bf16-mixed")]
)
def test_where_the_cpu_cannot_tell_the_timed_probe_decides(rates: MatmulRates, chosen: str) -> None:
    assert choose_precision("auto", UNKNOWN_CPU, lambda: rates).precision == chosen


def test_an_explicit_bf16_on_emulating_hardware_runs_with_one_warning_of_the_slowdown() -> None:
    choice = choose_precision("bf16-mixed", EMULATED_BF16_CPU, lambda: EMULATED_RATES)
    assert choice.precision == "bf16-mixed"
    assert choice.warning is not None and "\n" not in choice.warning
    assert "measured 61x slower than fp32 here (0.8 against 48.9 GFLOP/s)" in choice.warning
    assert "trainer.precision=auto would train in 32-true" in choice.warning


def test_an_explicit_precision_where_it_is_native_needs_no_probe_and_no_warning() -> None:
    assert choose_precision("bf16-mixed", A100, never_probed).warning is None
    forced = choose_precision("32-true", NATIVE_BF16_CPU, never_probed)
    assert forced.line == "precision 32-true: as set (trainer.precision=32-true)"


def test_fp16_is_refused_off_cuda_with_the_fix() -> None:
    with pytest.raises(
        ConfigError, match=r"16-mixed needs a CUDA GPU.*use trainer\.precision=auto"
    ):
        choose_precision("16-mixed", NATIVE_BF16_CPU, never_probed)


# /proc/cpuinfo's flags lines, cut to what decides (the real lines list ~100 flags).
ZEN3 = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma\n"
ZEN4 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
SAPPHIRE_RAPIDS = "flags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16\nCPU implementer\t: 0x41\n"


@pytest.mark.parametrize(
    ("cpuinfo", "native", "name"),
    [
        (ZEN3, False, "AVX2"),
        (ZEN4, True, "AVX512 with avx512_bf16"),
        (SAPPHIRE_RAPIDS, True, "AVX512 with avx512_bf16, amx_bf16"),
    ],
)
def test_an_x86_cpu_is_read_from_its_flags(cpuinfo: str, native: bool, name: str) -> None:
    assert cpu_hardware(cpuinfo) == Hardware("cpu", native, name)


@pytest.mark.parametrize("cpuinfo", [ARM, None])
def test_a_cpu_without_x86_flags_is_left_to_the_probe(cpuinfo: str | None) -> None:
    assert cpu_hardware(cpuinfo).bf16_native is None


def test_the_probe_is_measured_once_per_machine_then_read_from_the_store(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    first = probed_rates(NATIVE_BF16_CPU, store)
    assert first.fp32 > 0 and first.bf16 > 0
    again = probed_rates(NATIVE_BF16_CPU, store)
    assert again == first  # a second measurement would differ in its last digits
    assert len(list((tmp_path / "machine_probe").glob("[!.]*"))) == 1  # one published probe


def test_the_plan_trains_every_stage_in_the_resolved_precision(tmp_path: Path) -> None:
    config = compose_config(["experiment=distilbert_smoke", f"paths.root={tmp_path}"])
    plan = PipelinePlan.from_config(config, EMULATED_BF16_CPU)
    assert config["trainer"]["precision"] == "auto"
    assert plan.pretrain.trainer.precision == "32-true"
    assert plan.distill is not None and plan.distill.student_trainer.precision == "32-true"
    assert plan.precision is not None and "AVX2" in plan.precision.reason
    native = PipelinePlan.from_config(config, NATIVE_BF16_CPU)
    assert native.pretrain.trainer.precision == "bf16-mixed"


def test_the_run_says_its_precision_first_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    choice = choose_precision("bf16-mixed", EMULATED_BF16_CPU, lambda: EMULATED_RATES)
    with caplog.at_level(logging.INFO, logger="cloze.test"):
        choice.report(logging.getLogger("cloze.test"))
    lines = [(record.levelname, record.getMessage()) for record in caplog.records]
    assert lines == [
        ("INFO", "precision bf16-mixed: as set (trainer.precision=bf16-mixed)"),
        ("WARNING", choice.warning),
    ]
