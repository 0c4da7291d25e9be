"""The benchmarks run a precision row only where `trainer.precision: auto` would train in it."""

from __future__ import annotations

from benchmarks.precision_rows import auto_precision, skip_reason


def test_fp32_rows_always_run_and_fp16_rows_need_cuda_by_the_pipelines_own_rule() -> None:
    assert skip_reason("32-true", "cpu") is None
    reason = skip_reason("16-mixed", "cpu")
    assert reason is not None
    assert reason.startswith("trainer.precision=16-mixed needs a CUDA GPU")
    assert reason.endswith("but this row runs on cpu: use trainer.precision=auto or 32-true")


def test_bf16_rows_run_exactly_where_auto_trains_in_bf16_and_say_why_not() -> None:
    choice = auto_precision("cpu")
    reason = skip_reason("bf16-mixed", "cpu")
    if choice.precision == "bf16-mixed":
        assert reason is None
    else:
        assert reason == f"bf16 is not native: {choice.line}"
