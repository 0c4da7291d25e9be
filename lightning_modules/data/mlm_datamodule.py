"""Data module over packed shards: dynamic masks for training, one fixed mask for validation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from lightning_modules.data.collator import MaskingCollator
from lightning_modules.data.distributed import RankSlice, StridedPartition
from lightning_modules.data.packed_dataset import PackedSequenceDataset
from lightning_modules.data.resume import EpochShuffleSampler, TrainingStreamState
from lightning_modules.data.shard_format import ShardIndex, verify_shards
from lightning_modules.data.static_masking import StaticCopies, StaticMaskCollator
from lightning_modules.models.attention_masks import document_ids_from_separators

Collate = Callable[[list[Any]], dict[str, torch.Tensor]]


class FixedMaskDataset(Dataset[dict[str, torch.Tensor]]):
    """Validation sequences masked once with a fixed seed: every evaluation scores the same task."""

    def __init__(self, batch: dict[str, torch.Tensor]) -> None:
        self.batch = batch

    def __len__(self) -> int:
        return len(self.batch["input_ids"])

    def __getitem__(self, position: int) -> dict[str, torch.Tensor]:
        return {name: tensor[position] for name, tensor in self.batch.items()}


class PaddingMask:
    """Adds the attention mask that `document`-packed (padded) sequences need.

    Masking never selects or produces [PAD], so the masked ids still show where padding is.
    A class, not a closure, so DataLoader workers can pickle it.
    """

    def __init__(self, collate: Collate, pad_id: int) -> None:
        self.collate = collate
        self.pad_id = pad_id

    def __call__(self, items: list[Any]) -> dict[str, torch.Tensor]:
        return self.add_mask(self.collate(items))

    def add_mask(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {**batch, "attention_mask": batch["input_ids"] != self.pad_id}


class DocumentMarks:
    """Adds `document_ids` to concat-packed batches, so attention stays inside each document
    (`model.document_attention`). Computed from the masked ids: masking never selects, nor
    produces, the [SEP] that ends each document. A class, not a closure, so workers can pickle it.
    """

    def __init__(self, collate: Collate, sep_id: int) -> None:
        self.collate = collate
        self.sep_id = sep_id

    def __call__(self, items: list[Any]) -> dict[str, torch.Tensor]:
        return self.add_ids(self.collate(items))

    def add_ids(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {
            **batch,
            "document_ids": document_ids_from_separators(batch["input_ids"], self.sep_id),
        }


# Added to the seed for the general rows' fixed masks: other draws than the domain rows'.
GENERAL_MASK_SEED_OFFSET = 104729
# Each general row's position in the set, in its batches: the module keeps every row's figures,
# so the change between two validations is paired row by row (ranks see other rows).
GENERAL_ROW = "general_row"


@dataclass(frozen=True)
class GeneralRows:
    """A second validation set (held-out general text, as a one-split shard set packed like the
    training shards) and the collator that masks it once: always 15% of tokens, whatever the
    objective trains with, so its losses compare across runs and objectives."""

    shard_dir: Path
    collator: MaskingCollator


class MaskedLMDataModule(pl.LightningDataModule):
    def __init__(
        self,
        shard_dir: Path,
        collator: MaskingCollator,
        batch_size: int,
        seed: int,
        num_workers: int = 0,
        max_validation_sequences: int = 1024,
        static_copies: int | None = None,
        document_separator: int | None = None,
        general: GeneralRows | None = None,
    ) -> None:
        """`document_separator`: the [SEP] id, to mark documents in concat-packed rows (None:
        unmarked; `document`-packed rows hold one document each and need no marks). `general`:
        rows validated as a second loader (dataloader_idx 1) beside the domain's."""
        super().__init__()
        self.general = general
        self.general_set: FixedMaskDataset | None = None
        self.shard_dir = shard_dir
        self.index = ShardIndex.load(shard_dir)
        self.collator = collator
        self.batch_size = batch_size
        self.seed = seed
        self.num_workers = num_workers
        self.max_validation_sequences = max_validation_sequences
        self.static_copies = static_copies
        self.train_set: Dataset[Any] | None = None
        self.sampler = EpochShuffleSampler(0, seed)
        self.stream_state = TrainingStreamState(self.sampler, collator, batch_size)
        self.validation_set: FixedMaskDataset | None = None
        collate: Collate = collator if static_copies is None else StaticMaskCollator(collator, seed)
        # Concat-packed shards hold no padding: no mask, which keeps attention on its fast path.
        self.padding = (
            PaddingMask(collate, self.index.pad_id) if self.index.packing == "document" else None
        )
        self.documents = (
            DocumentMarks(collate, document_separator)
            if document_separator is not None and self.index.packing == "concat"
            else None
        )
        self.collate = self.padding or self.documents or collate

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        verify_shards(self.shard_dir, self.index)
        sequences = PackedSequenceDataset(self.shard_dir, self.index, "train")
        if len(sequences) < self.batch_size:
            raise ValueError(
                f"{self.shard_dir} holds {len(sequences)} training sequences, fewer than "
                f"trainer.batch_size={self.batch_size}: add text or lower the batch size"
            )
        self.train_set = (
            sequences if self.static_copies is None else StaticCopies(sequences, self.static_copies)
        )
        self.sampler.size = len(self.train_set)  # type: ignore[arg-type]
        validation = PackedSequenceDataset(self.shard_dir, self.index, "validation")
        if self.max_validation_sequences and not len(validation):
            raise ValueError(
                f"{self.shard_dir} holds no validation sequence: raise "
                "corpus.validation_fraction or add text"
            )
        count = min(len(validation), self.max_validation_sequences)
        if count:
            self.validation_set = self.masked_once(validation, count, self.collator, 7919)
        if self.general is not None:
            general_dir = self.general.shard_dir
            index = ShardIndex.load(general_dir)
            verify_shards(general_dir, index)
            rows = PackedSequenceDataset(general_dir, index, "validation")
            count = min(len(rows), self.max_validation_sequences)
            masked = self.masked_once(rows, count, self.general.collator, GENERAL_MASK_SEED_OFFSET)
            self.general_set = FixedMaskDataset({**masked.batch, GENERAL_ROW: torch.arange(count)})

    def masked_once(
        self, rows: PackedSequenceDataset, count: int, collator: MaskingCollator, offset: int
    ) -> FixedMaskDataset:
        """The first `count` rows masked with a generator seeded from the run's seed: every
        validation scores the same positions."""
        stacked = torch.stack([rows[i] for i in range(count)])
        masked = collator.mask(stacked, torch.Generator().manual_seed(self.seed + offset))
        if self.padding is not None:
            masked = self.padding.add_mask(masked)
        if self.documents is not None:
            masked = self.documents.add_ids(masked)
        return FixedMaskDataset(masked)

    def rank_and_world(self) -> tuple[int, int]:
        """This process's rank and the number of training processes (0, 1 outside a Trainer)."""
        trainer = self.trainer
        return (0, 1) if trainer is None else (trainer.global_rank, trainer.world_size)

    def on_cuda(self) -> bool:
        return self.trainer is not None and self.trainer.strategy.root_device.type == "cuda"

    def train_dataloader(self) -> DataLoader:
        assert self.train_set is not None, "setup() must run first"
        rank, world = self.rank_and_world()
        # batch_size is the global batch: every rank draws it whole and keeps its own rows.
        return DataLoader(
            self.train_set,
            batch_size=self.batch_size,
            sampler=self.sampler,
            # Its own generator: a loader otherwise draws its worker base seed from torch's
            # global RNG, which would shift dropout between a resumed and an uninterrupted run.
            generator=torch.Generator().manual_seed(self.seed),
            drop_last=True,
            collate_fn=self.collate if world == 1 else RankSlice(self.collate, rank, world),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            # Page-locked batches let Lightning's non-blocking copy to a GPU overlap the step.
            pin_memory=self.on_cuda(),
        )

    def val_dataloader(self) -> DataLoader | list:
        """The domain rows; with `general`, a list: the domain's loader, then the general's."""
        if self.validation_set is None:
            return []
        if self.general_set is None:
            return self.fixed_loader(self.validation_set)
        return [self.fixed_loader(self.validation_set), self.fixed_loader(self.general_set)]

    def fixed_loader(self, rows: FixedMaskDataset) -> DataLoader:
        rank, world = self.rank_and_world()
        return DataLoader(
            rows,
            batch_size=self.batch_size,
            sampler=StridedPartition(len(rows), rank, world),
            generator=torch.Generator().manual_seed(self.seed),
        )
