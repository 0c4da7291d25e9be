"""Where the shards stage's per-file work runs: Prefect tasks on a local pool or a Dask cluster.

Each unit is a Prefect task run, so a large sharding job shows its progress file by file in the
Prefect UI, and `shards.executor=dask` moves the same tasks onto a Dask cluster through
`prefect-dask`. The runner only decides where units run; the merge stays in order, so the shards
are the same bytes on any runner.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner, ThreadPoolTaskRunner

from flows.stages.shards.stage import ShardSettings, UnitMapper
from flows.stages.shards.units import UnitJob, UnitResult, encode_unit


@task(name="encode-corpus-unit", cache_policy=NO_CACHE, task_run_name="encode-{job.index}")
def encode_unit_task(job: UnitJob) -> UnitResult:
    return encode_unit(job)


def task_runner_for(settings: ShardSettings) -> TaskRunner:
    if settings.executor == "dask":
        from prefect_dask import DaskTaskRunner

        if settings.dask_address:
            return DaskTaskRunner(address=settings.dask_address)
        return DaskTaskRunner(
            cluster_kwargs={
                "n_workers": settings.num_workers,
                "threads_per_worker": 1,
                "processes": True,
                "dashboard_address": None,
            }
        )
    if settings.num_workers > 1:
        return ProcessPoolTaskRunner(max_workers=settings.num_workers)
    return ThreadPoolTaskRunner(max_workers=1)


def prefect_unit_mapper(settings: ShardSettings) -> UnitMapper:
    def run(jobs: list[UnitJob]) -> list[UnitResult]:
        with task_runner_for(settings) as runner:
            futures = [runner.submit(encode_unit_task, {"job": job}) for job in jobs]
            return [future.result() for future in futures]

    return run
