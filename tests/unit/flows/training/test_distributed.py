"""Scale-out settings and the rank-aware batch split, without starting any process."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from flows.core.artifacts import ArtifactStore
from flows.core.settings import ConfigError, output_settings, settings_from
from flows.orchestration import rank_entry
from flows.training.launch import build_on_ranks, run_on_local_ranks
from flows.training.settings import TrainerSettings
from flows.training.trainer import lightning_strategy
from lightning_modules.data.collator import MaskingCollator
from lightning_modules.data.distributed import (
    LOSS_WEIGHT,
    RankSlice,
    StridedPartition,
    rank_rows,
)
from lightning_modules.data.masking_rules import MaskingRule
from lightning_modules.data.resume import EpochShuffleSampler
from lightning_modules.divergence import TrainingDiverged
from lightning_modules.models.config import IGNORE_INDEX

SMALL = {"max_steps": 10, "warmup_steps": 1, "batch_size": 8}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"devices": 3},
            "trainer.batch_size=8 is the global batch and must divide evenly over "
            "trainer.devices=3 x trainer.num_nodes=1 = 3 processes: make it a multiple of 3",
        ),
        (
            {"devices": 2, "num_nodes": 3},
            "trainer.batch_size=8 is the global batch and must divide evenly over "
            "trainer.devices=2 x trainer.num_nodes=3 = 6 processes: make it a multiple of 6",
        ),
        (
            {"strategy": "deepspeed"},
            "trainer.strategy='deepspeed' must be one of ('auto', 'ddp', 'fsdp')",
        ),
        (
            {"strategy": "fsdp", "devices": 2},
            "trainer.strategy=fsdp needs trainer.accelerator=gpu (Lightning runs FSDP on CUDA "
            "only; got trainer.accelerator=cpu): use trainer.strategy=ddp",
        ),
        (
            {"strategy": "fsdp", "devices": 2, "accelerator": "gpu"},
            "trainer.strategy=fsdp cannot clip gradients by norm in Lightning "
            "(trainer.grad_clip=1.0): set trainer.grad_clip=0 or use trainer.strategy=ddp",
        ),
        ({"num_nodes": 0}, "trainer.num_nodes=0 must be at least 1"),
        ({"devices": "2"}, "trainer.devices='2' must be an integer"),
    ],
)
def test_scale_out_settings_are_rejected_with_the_key_and_the_fix(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_from(TrainerSettings, {**SMALL, **overrides}, "trainer")
    assert str(raised.value) == message


def test_placement_stays_out_of_the_artifact_key_because_the_batch_is_global() -> None:
    one = TrainerSettings(**SMALL)  # type: ignore[arg-type]
    many = one.model_copy(update=dict(devices=2, num_nodes=2, strategy="ddp"))
    assert many.world_size == 4
    exclude = TrainerSettings.NOT_IN_KEY
    assert output_settings(one, exclude) == output_settings(many, exclude)


def test_auto_strategy_means_ddp_once_there_are_several_processes() -> None:
    one = TrainerSettings(**SMALL)  # type: ignore[arg-type]
    assert lightning_strategy(one) == "auto"
    assert lightning_strategy(one.model_copy(update=dict(devices=2))) == "ddp"
    fsdp = lightning_strategy(
        one.model_copy(update=dict(devices=2, strategy="fsdp", grad_clip=0, accelerator="gpu"))
    )
    assert type(fsdp).__name__ == "FSDPStrategy"


def test_several_nodes_need_a_per_rank_launcher(tmp_path: Path) -> None:
    settings = TrainerSettings(**{**SMALL, "num_nodes": 2})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"trainer.num_nodes=2 needs one process per rank"):
        build_on_ranks(ArtifactStore(tmp_path), "pretrain", "k", {}, settings, print, None)
    assert not (tmp_path / "pretrain").exists()  # refused before any lock or temp dir


def test_a_launcher_that_started_another_world_size_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "0")
    settings = TrainerSettings(**{**SMALL, "devices": 2})  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as raised:
        build_on_ranks(ArtifactStore(tmp_path), "pretrain", "k", {}, settings, print, None)
    assert str(raised.value) == (
        "the launcher started 4 processes but trainer.devices=2 x trainer.num_nodes=1 = 2: "
        "set them to the processes per node and the node count"
    )


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_rank_blocks_partition_the_global_batch(world: int) -> None:
    rows = [list(range(8))[rank_rows(8, rank, world)] for rank in range(world)]
    assert [row for block in rows for row in block] == list(range(8))
    assert {len(block) for block in rows} == {8 // world}


def collator() -> MaskingCollator:
    return MaskingCollator(
        MaskingRule(), vocab_size=64, mask_token_id=4, special_token_ids=[0, 1, 2, 3, 4], seed=11
    )


def epoch_batches(size: int, batch: int, epoch: int, start: int = 0) -> list[list[int]]:
    """The global batches of an epoch as the data module's sampler yields them (drop_last)."""
    sampler = EpochShuffleSampler(size, seed=5)
    sampler.resume_at(epoch, start)
    order = list(sampler)
    return [order[i : i + batch] for i in range(0, len(order) - batch + 1, batch)]


@pytest.mark.parametrize("world", [2, 4])
def test_ranks_see_every_sequence_once_per_epoch_with_one_process_masks(world: int) -> None:
    size, batch = 45, 8
    data = torch.arange(5, 5 + size).repeat_interleave(6).view(size, 6)  # row i: all 5 + i
    single, ranks = collator(), [RankSlice(collator(), rank, world) for rank in range(world)]
    for epoch in range(2):
        seen: list[int] = []
        for indices in epoch_batches(size, batch, epoch):
            items = [data[i] for i in indices]
            whole = single(items)
            parts = [split(items) for split in ranks]
            assert torch.equal(torch.cat([p["input_ids"] for p in parts]), whole["input_ids"])
            assert torch.equal(torch.cat([p["labels"] for p in parts]), whole["labels"])
            for part in parts:
                restored = torch.where(
                    part["labels"] != IGNORE_INDEX, part["labels"], part["input_ids"]
                )
                seen += [int(row[0]) - 5 for row in restored]
        assert len(seen) == len(set(seen)) == size // batch * batch
        assert set(seen) <= set(range(size))


def test_a_mid_epoch_resume_continues_the_same_global_batches_on_every_rank() -> None:
    uninterrupted = epoch_batches(40, 8, epoch=1)
    resumed = epoch_batches(40, 8, epoch=1, start=2 * 8)  # what TrainingStreamState restores
    assert resumed == uninterrupted[2:]


def test_loss_weights_make_the_rank_average_the_global_mean() -> None:
    generator = torch.Generator().manual_seed(0)
    items = [torch.randint(5, 45, (16,), generator=generator) for _ in range(8)]
    token_loss = torch.rand(8, 16, generator=generator)  # any per-token loss
    whole = collator()(items)
    selected = whole["labels"] != IGNORE_INDEX
    global_mean = token_loss[selected].mean()
    weighted = []
    for rank in range(2):
        part = RankSlice(collator(), rank, 2)(items)
        rows = token_loss[rank_rows(8, rank, 2)]
        rank_mean = rows[part["labels"] != IGNORE_INDEX].mean()
        weighted.append(rank_mean * part[LOSS_WEIGHT])
    assert torch.stack(weighted).mean() == pytest.approx(float(global_mean), abs=1e-6)


@pytest.mark.parametrize(("size", "world"), [(10, 1), (10, 3), (2, 4)])
def test_validation_partition_covers_each_item_once_without_padding(size: int, world: int) -> None:
    parts = [list(StridedPartition(size, rank, world)) for rank in range(world)]
    assert sorted(item for part in parts for item in part) == list(range(size))
    assert [len(part) for part in parts] == [
        len(StridedPartition(size, r, world)) for r in range(world)
    ]


def test_the_rank_entry_point_refuses_several_ranks_in_one_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert rank_entry.main(["trainer.devices=2"]) == 2
    assert capsys.readouterr().err == (
        "error: trainer.devices x trainer.num_nodes = 2 processes, but this one was not started "
        "per rank: launch flows.orchestration.rank_entry with torchrun (see infra/multinode.md), "
        "or use `python -m flows` on one node\n"
    )


def diverge_on_rank_one(job: None, directory: Path) -> dict:
    """A rank's training function (module level: spawned ranks import it)."""
    if torch.distributed.get_rank() == 1:
        raise TrainingDiverged("pretrain diverged at step 3 of 9: the training loss is nan.")
    torch.distributed.barrier()  # rank zero waits in a collective, as in training
    return {}


@pytest.mark.slow  # two spawned interpreters: 27 s on a loaded 2-core machine
def test_a_rank_that_diverges_stops_the_others_and_keeps_its_error_type(tmp_path: Path) -> None:
    with pytest.raises(TrainingDiverged, match=r"^pretrain diverged at step 3 of 9"):
        run_on_local_ranks(2, "cpu", diverge_on_rank_one, (None, tmp_path), tmp_path / "r.json")
