"""One process per rank, without re-running the flow in every rank.

Lightning's `ddp` launcher re-executes `sys.argv` for ranks 1..N-1: from inside a Prefect flow
that reruns the whole pipeline per rank, with an MLflow run each. Instead:

- single node, from the flow: `run_on_local_ranks` spawns N fresh interpreters that run only the
  training function (`spawn`, so no Prefect threads or MLflow clients are forked); rank zero's
  return value comes back to the caller, which alone publishes the artifact;
- several nodes: `torchrun` (under `srun` or a Kubernetes Job) starts
  `python -m flows.orchestration.rank_entry` once per rank; rank zero decides and broadcasts
  (`broadcast_from_rank_zero`), the other ranks train and publish nothing.

Both set the same environment as torchrun, so Lightning sees one kind of cluster either way.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from flows.core.artifacts import ArtifactRef, ArtifactStore, atomic_file, replace_json
from flows.core.logs import setup_logging
from flows.core.settings import ConfigError
from flows.training.settings import TrainerSettings
from lightning_modules.divergence import TrainingDiverged


def launched_per_rank() -> bool:
    """Whether torchrun (or `run_on_local_ranks`) started this process as one of several ranks."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "LOCAL_RANK" in os.environ


def is_rank_zero() -> bool:
    """Rank zero of the process group, or of the launch before the group exists; else True."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return not launched_per_rank() or int(os.environ.get("RANK", "0")) == 0


def build_on_ranks(
    store: ArtifactStore,
    stage: str,
    key: str,
    record: Mapping[str, Any],
    settings: TrainerSettings,
    train: Callable[[Any, Path], dict[str, Any]],
    job: Any,
) -> ArtifactRef:
    """`store.get_or_build` with `train(job, directory)` run on every rank; rank zero publishes.

    `train` must be a module-level function and `job` picklable (spawned ranks import them).
    """

    def publish(build: Callable[[Path], dict[str, Any]]) -> ArtifactRef:
        return store.get_or_build(stage, key, build, record)

    world = settings.world_size
    if launched_per_rank():
        return build_as_launched_rank(settings, train, job, publish)
    if settings.num_nodes > 1:
        raise ConfigError(
            f"trainer.num_nodes={settings.num_nodes} needs one process per rank on every node: "
            "start `python -m flows.orchestration.rank_entry` with torchrun, srun or a Kubernetes "
            "Job (infra/multinode.md), or set trainer.num_nodes=1"
        )

    def build(directory: Path) -> dict[str, Any]:
        if world == 1:
            return train(job, directory)
        result_file = store.work_dir(stage, key) / "rank0-outputs.json"
        result_file.parent.mkdir(parents=True, exist_ok=True)
        return run_on_local_ranks(world, settings.accelerator, train, (job, directory), result_file)

    return publish(build)


def build_as_launched_rank(
    settings: TrainerSettings,
    train: Callable[[Any, Path], dict[str, Any]],
    job: Any,
    publish: Callable[[Callable[[Path], dict[str, Any]]], ArtifactRef],
) -> ArtifactRef:
    """Under torchrun: rank zero takes the store's lock and decides (`publish`, which builds or
    reuses the artifact); the rest follow it.

    Rank zero broadcasts whether it trains (False on a cache hit), then the published ref. The
    other ranks never touch the lock or the store, so a cache hit cannot leave one rank training
    alone, and a rank that starts late cannot see a different store than rank zero did.
    """
    started = int(os.environ["WORLD_SIZE"])
    if started != settings.world_size:
        raise ConfigError(
            f"the launcher started {started} processes but trainer.devices={settings.devices} x "
            f"trainer.num_nodes={settings.num_nodes} = {settings.world_size}: set them to the "
            "processes per node and the node count"
        )
    ensure_process_group(settings.accelerator)
    if not is_rank_zero():
        if broadcast_from_rank_zero(None):
            train(job, Path(os.devnull))  # saves nothing: only rank zero writes
        return broadcast_from_rank_zero(None)  # type: ignore[no-any-return]

    def build(directory: Path) -> dict[str, Any]:
        broadcast_from_rank_zero(True)
        return train(job, directory)

    ref = publish(build)
    if ref.cache_hit:
        broadcast_from_rank_zero(False)
    return broadcast_from_rank_zero(ref)  # type: ignore[no-any-return]


def backend_for(accelerator: str) -> str:
    return "gloo" if accelerator == "cpu" else "nccl"


def ensure_process_group(accelerator: str) -> None:
    """Joins the job's process group (from torchrun's environment) before Lightning does.

    Lightning reuses an initialised group, so rank zero can broadcast decisions before and after
    `trainer.fit` (whether to train at all, whether to resume) over the same connection.
    """
    if not dist.is_initialized():
        if accelerator != "cpu":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(backend_for(accelerator))


def broadcast_from_rank_zero(value: Any) -> Any:
    """Rank zero's `value` on every rank; unchanged without a process group."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_on_local_ranks(
    world_size: int,
    accelerator: str,
    target: Callable[..., dict[str, Any]],
    args: tuple[Any, ...],
    result_file: Path,
) -> dict[str, Any]:
    """Runs `target(*args)` in `world_size` spawned processes; returns rank zero's result.

    The result travels as JSON (as the manifest it ends up in): data, never code.

    If any rank fails, the others are terminated and the failure is raised here, so a broken
    rank can never leave the rest waiting in a collective.
    """
    result_file.unlink(missing_ok=True)
    diverged = result_file.with_name("diverged.txt")  # a rank's TrainingDiverged message
    diverged.unlink(missing_ok=True)
    rank_args = (world_size, free_port(), accelerator, target, args, result_file, progress_level())
    try:
        mp.start_processes(
            _rank_main, args=rank_args, nprocs=world_size, join=True, start_method="spawn"
        )
    except mp.ProcessRaisedException as error:
        if diverged.is_file():  # its type is lost across processes: raised again here
            raise TrainingDiverged(diverged.read_text()) from error
        raise
    result: dict[str, Any] = json.loads(result_file.read_text())
    result_file.unlink()
    return result


def progress_level() -> int:
    """The level of Cloze's own loggers here, for the spawned ranks."""
    return logging.getLogger("cloze").getEffectiveLevel()


def _rank_main(
    local_rank: int,
    world_size: int,
    port: int,
    accelerator: str,
    target: Callable[..., Any],
    args: tuple[Any, ...],
    result_file: Path,
    log_level: int,
) -> None:
    # A fresh interpreter: the caller's logging setup is gone, so keep its progress lines.
    setup_logging(log_level)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        RANK=str(local_rank),
        LOCAL_RANK=str(local_rank),
        GROUP_RANK="0",
    )
    # The ranks share this machine's cores; torch would otherwise give each of them all of them.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    ensure_process_group(accelerator)
    try:
        result = target(*args)
    except TrainingDiverged as error:
        with atomic_file(result_file.with_name("diverged.txt"), "w") as handle:
            handle.write(str(error))
        raise
    if local_rank == 0:
        replace_json(result_file, result)
    dist.destroy_process_group()
