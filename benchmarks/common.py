"""Shared benchmark plumbing: the real data set, child processes for clean peak-memory figures."""

from __future__ import annotations

import multiprocessing
import resource
import time
from collections.abc import Callable
from pathlib import Path
from queue import Empty
from typing import Any

import torch

from flows.core import tables
from flows.downstream.tasks.spec import default_data_dir

DATA_DIR = default_data_dir()


def data_file(relative: str) -> Path:
    path = DATA_DIR / relative
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: set CLOZE_DATA_DIR to the shared data folder")
    return path


def cpu_seconds() -> float:
    """User + system CPU time of this process and its reaped children (worker pools): the work
    a path did, which a shared machine's load does not inflate as it does wall time."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(target: Callable[..., dict[str, Any]], kwargs: dict[str, Any], queue: Any) -> None:
    result = target(**kwargs)
    result.setdefault("peak_rss_mb", peak_rss_mb())  # a target may read it before extra work
    # Paths that spread work over processes (num_proc, num_workers): the largest worker's peak.
    result["worker_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    queue.put(result)


def in_child_process(target: Callable[..., dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """Runs one measurement in a fresh process, so each path's peak RSS is its own."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(target, kwargs, queue))
    process.start()
    while True:
        try:
            result = queue.get(timeout=5)
            break
        except Empty:
            if not process.is_alive():
                raise RuntimeError(
                    f"{target.__name__} failed in its process (exit code "
                    f"{process.exitcode}); its traceback is above"
                ) from None
    process.join()
    return result


def matmul_peak_gflops(dtype: torch.dtype, size: int = 2048, repeats: int = 5) -> float:
    """Achievable dense matmul rate on this machine: the denominator of MFU."""
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    elapsed = time.perf_counter() - started
    return 2 * size**3 * repeats / elapsed / 1e9


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """Benchmark rows (dicts) as a table through the project's renderer; floats get thousands
    separators, three decimals below 100 and none above, so the columns stay readable."""

    def cell(value: Any) -> str:
        return (
            f"{value:,.3f}"
            if isinstance(value, float) and abs(value) < 100
            else (f"{value:,.0f}" if isinstance(value, float) else str(value))
        )

    return tables.markdown_table(
        columns, [[cell(row.get(column, "")) for column in columns] for row in rows]
    )
