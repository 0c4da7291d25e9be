"""DDP over two gloo CPU processes trains as one process with the same global batch would.

Each run gets its own store holding the same tokenizer and shards. Two ranks are spawned from
the calling process, as the flow does. Compared with one process: the per-step training loss
logged to MLflow, the final weights and validation loss, the MLflow runs in the store, the
published artifacts; and a single-process run killed mid-way and resumed on two ranks.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file

from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.corpora import CorpusSettings, open_corpus
from flows.stages.collators import make_collator
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import pretrain
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, load_tokenizer, train_tokenizer
from flows.tracking.runs import Tracker
from flows.training.launch import run_on_local_ranks
from flows.training.settings import TrainerSettings
from flows.training.trainer import make_trainer
from lightning_modules.data.mlm_datamodule import MaskedLMDataModule
from lightning_modules.models.config import IGNORE_INDEX, WEIGHTS_FILE
from tests.fakes import write_corpus
from tests.integration.ddp_worker import DDP, KILLED, TRAINER, only_key, settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding only the tokenizer and shards, built once for the module."""
    root = tmp_path_factory.mktemp("inputs")
    store = ArtifactStore(root)
    corpus = open_corpus(
        CorpusSettings(kind="files", paths=[str(write_corpus(root / "corpus.txt"))])
    )
    tokenizer = train_tokenizer(TokenizerSettings(vocab_size=200), corpus, store)
    build_shards(ShardSettings(seq_len=32), corpus, tokenizer, store)
    return root


def store_with_inputs(inputs: Path, root: Path) -> Path:
    for stage in ("tokenizer", "shards"):
        shutil.copytree(inputs / stage, root / stage, symlinks=True)  # the tokenizer's key link
    return root


def train(store_root: Path, trainer: TrainerSettings, tracker: Tracker) -> ArtifactRef:
    store = ArtifactStore(store_root)
    tokenizer, shards = (
        store.lookup(stage, only_key(store_root / stage)) for stage in ("tokenizer", "shards")
    )
    assert tokenizer is not None and shards is not None
    run = tracker.start_run("pretrain")
    ref = pretrain(settings(trainer), shards, tokenizer, store, [run.lightning_logger()])
    run.finish()
    return ref


def loss_history(client: MlflowClient, run_id: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, "train/loss"))


def assert_same_weights(expected: ArtifactRef, actual: ArtifactRef, atol: float) -> None:
    want, got = (load_file(str(ref.path / WEIGHTS_FILE)) for ref in (expected, actual))
    assert want.keys() == got.keys()
    for name, tensor in want.items():
        assert torch.allclose(got[name], tensor, atol=atol), name


@pytest.fixture(scope="module")
def reference(inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[ArtifactRef, str]:
    """One process, the same global batch: what every two-rank run here must reproduce."""
    root = tmp_path_factory.mktemp("reference")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    ref = train(store_with_inputs(inputs, root / "store"), TRAINER, tracker(uri))
    return ref, uri


def tracker(uri: str) -> Tracker:
    return Tracker(uri, "ddp-test", None)


def test_two_gloo_ranks_match_one_process(
    inputs: Path, reference: tuple[ArtifactRef, str], tmp_path: Path
) -> None:
    single, uri = reference
    distributed = train(store_with_inputs(inputs, tmp_path / "ddp"), DDP, tracker(uri))

    assert distributed.key == single.key  # devices and strategy stay out of the key
    assert only_key(tmp_path / "ddp" / "pretrain") == distributed.key  # one artifact, no temp
    assert distributed.outputs["steps"] == single.outputs["steps"] == 24
    client = MlflowClient(uri)
    runs = client.search_runs([tracker(uri).experiment_id], order_by=["attributes.start_time ASC"])
    assert len(runs) == 2  # the two this test opened: no rank opened a run of its own
    one, two = (loss_history(client, run.info.run_id) for run in runs)
    assert [step for step, _ in one] == [step for step, _ in two]  # once per step: rank 0 only
    difference = max(abs(a - b) for (_, a), (_, b) in zip(one, two, strict=True))
    print(f"max |loss(1 process) - loss(2 ranks)| over {len(one)} steps: {difference:.2e}")
    assert difference < 1e-4
    assert_same_weights(single, distributed, atol=1e-4)
    assert distributed.outputs["val_loss"] == pytest.approx(single.outputs["val_loss"], abs=1e-4)


def test_a_run_killed_on_one_process_resumes_exactly_on_two_ranks(
    inputs: Path, reference: tuple[ArtifactRef, str], tmp_path: Path
) -> None:
    single, _ = reference
    root = store_with_inputs(inputs, tmp_path / "resumed")
    command = [sys.executable, "-m", "tests.integration.ddp_worker", str(root), "12"]
    assert subprocess.run(command, timeout=300).returncode == KILLED
    assert (root / "pretrain" / f".work-{single.key}" / "checkpoints" / "last.ckpt").is_file()
    assert not (root / "pretrain" / single.key).exists()

    resumed = train(root, DDP, Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "resume", None))
    assert resumed.outputs["resumed"] is True
    assert resumed.outputs["steps"] == 24
    assert_same_weights(single, resumed, atol=1e-5)
    assert resumed.outputs["val_loss"] == pytest.approx(single.outputs["val_loss"], abs=1e-5)


class RowRecorder(pl.LightningModule):
    """Records the batches a rank trains on; its loss only keeps DDP's gradient hooks fed."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[dict[str, torch.Tensor]] = []

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen.append({name: batch[name] for name in ("input_ids", "labels")})
        return self.weight.sum() * 0.0

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data_module(store_root: Path) -> MaskedLMDataModule:
    store = ArtifactStore(store_root)
    tokenizer = store.lookup("tokenizer", only_key(store_root / "tokenizer"))
    assert tokenizer is not None
    collator = make_collator(ObjectiveSettings(), load_tokenizer(tokenizer), 3)
    shards = store_root / "shards" / only_key(store_root / "shards")
    return MaskedLMDataModule(shards, collator, DDP.batch_size, 3, max_validation_sequences=0)


def record_batches_on_rank(store_root: Path, out_dir: Path) -> dict[str, int]:
    """One epoch under the real two-rank DDP trainer; each rank saves the batches it got."""
    data = data_module(store_root)
    module = RowRecorder()
    trainer = make_trainer(
        DDP, out_dir, [], [data.stream_state], distributed=True, max_epochs=1, limit_val_batches=0
    )
    trainer.fit(module, datamodule=data)
    torch.save(module.seen, out_dir / f"rank{trainer.global_rank}.pt")
    return {"steps": trainer.global_step}


def originals(batch: dict[str, torch.Tensor]) -> list[tuple[int, ...]]:
    """The unmasked sequences: labels hold the original id wherever a token was masked."""
    labels = batch["labels"]
    restored = torch.where(labels != IGNORE_INDEX, labels, batch["input_ids"])
    return [tuple(row) for row in restored.tolist()]


def test_each_sequence_is_trained_on_once_per_epoch_across_ranks(
    inputs: Path, tmp_path: Path
) -> None:
    store_with_inputs(inputs, tmp_path)
    outputs = run_on_local_ranks(
        2, "cpu", record_batches_on_rank, (tmp_path, tmp_path), tmp_path / "out.json"
    )
    rank0, rank1 = (torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2))

    data = data_module(tmp_path)
    data.setup()
    assert data.train_set is not None
    sequences = Counter(tuple(data.train_set[i].tolist()) for i in range(len(data.train_set)))
    one_process = list(data.train_dataloader())  # no Trainer: rank 0 of 1, the whole batch
    steps = len(data.train_set) // DDP.batch_size
    assert len(rank0) == len(rank1) == len(one_process) == outputs["steps"] == steps
    half = DDP.batch_size // 2
    seen: Counter[tuple[int, ...]] = Counter()
    for whole, first, second in zip(one_process, rank0, rank1, strict=True):
        assert len(originals(first)) == len(originals(second)) == half
        # Rank r trains on block r of the global batch, with the masks one process draws.
        for name in ("input_ids", "labels"):
            assert torch.equal(torch.cat([first[name], second[name]]), whole[name])
        seen.update(originals(first) + originals(second))
    # Every sequence at most once (drop_last leaves out fewer than one global batch).
    assert not seen - sequences
    assert sequences.total() - seen.total() < DDP.batch_size
