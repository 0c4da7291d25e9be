"""Sharding a multi-file corpus: parallel units merged in order, packing modes, resume."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.corpora import CorpusSettings, open_corpus
from flows.corpora.cleaning import document_identity
from flows.corpora.formats import CorpusInputError
from flows.stages.shards.stage import SeenKeys, ShardSettings, build_shards
from flows.stages.shards.units import UnitJob, UnitResult, encode_unit
from flows.stages.tokenizer import TokenizerSettings, load_tokenizer, train_tokenizer
from lightning_modules.data.packed_dataset import PackedSequenceDataset
from lightning_modules.data.shard_format import ShardIndex
from tests.fakes import GREEK_LETTERS

WORDS = [*GREEK_LETTERS[:14], "pi"]


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five files; some paragraphs repeat within and across files, a few are too short."""
    rng = np.random.default_rng(1)
    directory = tmp_path_factory.mktemp("multi")
    shared = [" ".join(rng.choice(WORDS, size=12)) for _ in range(5)]
    for index in range(5):
        own = [" ".join(rng.choice(WORDS, size=int(rng.integers(6, 60)))) for _ in range(120)]
        paragraphs = [*own[:60], *shared, "too short", *own[60:], own[0]]
        (directory / f"part-{index}.txt").write_text("\n\n".join(paragraphs))
    return directory


@pytest.fixture(scope="module")
def tokenizer(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> ArtifactRef:
    store = ArtifactStore(tmp_path_factory.mktemp("tokenizer"))
    return train_tokenizer(TokenizerSettings(vocab_size=150), corpus(corpus_dir), store)


def corpus(path: Path, **settings: object):
    return open_corpus(CorpusSettings(kind="files", paths=[str(path)], **settings))


def shard_bytes(ref: ArtifactRef) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(ref.path.glob("*.bin"))}


def test_two_workers_give_the_same_bytes_as_one_and_the_sequential_document_order(
    tmp_path: Path, corpus_dir: Path, tokenizer: ArtifactRef
) -> None:
    settings = ShardSettings(seq_len=16, sequences_per_shard=64)
    one = build_shards(settings, corpus(corpus_dir), tokenizer, ArtifactStore(tmp_path / "1"))
    two = build_shards(
        ShardSettings(seq_len=16, sequences_per_shard=64, num_workers=2, batch_documents=9),
        corpus(corpus_dir),
        tokenizer,
        ArtifactStore(tmp_path / "2"),
    )
    assert one.key == two.key
    assert len(shard_bytes(one)) > 3 and shard_bytes(one) == shard_bytes(two)
    index = ShardIndex.load(one.path)
    assert all(info.tokens == info.sequences * 16 for info in index.splits["train"])
    assert one.outputs["units"] == 5
    # 5 files x (1 repeated own paragraph + 5 shared) minus the 5 shared kept once.
    assert one.outputs["corpus_dropped_duplicate"] == 5 * 6 - 5
    assert one.outputs["corpus_dropped_short"] == 5

    # The merge is the sequential reader's order: the stream is the train documents + [SEP].
    reference = corpus(corpus_dir)
    trained = load_tokenizer(tokenizer)
    train_texts = [t for t in reference.documents() if not document_identity(t, 0.05)[1]]
    expected = [
        token
        for encoding in trained.tokenizer.encode_batch(train_texts, add_special_tokens=False)
        for token in [*encoding.ids, trained.special.sep]
    ]
    index = ShardIndex.load(one.path)
    dataset = PackedSequenceDataset(one.path, index, "train")
    stream = np.stack([dataset[i] for i in range(len(dataset))])[:, 1:].reshape(-1).tolist()
    assert stream == expected[: len(stream)]
    assert len(expected) - len(stream) == one.outputs["train_dropped_tokens"] < 16


def test_document_packing_gives_one_padded_document_per_sequence(
    tmp_path: Path, corpus_dir: Path, tokenizer: ArtifactRef
) -> None:
    ref = build_shards(
        ShardSettings(seq_len=32, packing="document"),
        corpus(corpus_dir),
        tokenizer,
        ArtifactStore(tmp_path),
    )
    index = ShardIndex.load(ref.path)
    special = load_tokenizer(tokenizer).special
    rows = PackedSequenceDataset(ref.path, index, "train")
    assert index.packing == "document" and index.pad_id == special.pad
    assert len(rows) == ref.outputs["train_documents"]
    batch = np.stack([rows[i].numpy() for i in range(len(rows))])
    assert (batch[:, 0] == special.cls).all()
    assert ((batch == special.sep).sum(axis=1) == 1).all()
    assert (batch == special.pad).any() and ref.outputs["train_dropped_tokens"] > 0
    assert sum(info.tokens for info in index.splits["train"]) == (batch != special.pad).sum()


def test_a_killed_run_reuses_the_units_it_finished(
    tmp_path: Path, corpus_dir: Path, tokenizer: ArtifactRef
) -> None:
    store = ArtifactStore(tmp_path)
    encoded: list[int] = []

    def dies_after_two(jobs: list[UnitJob]) -> list[UnitResult]:
        results = [encode_unit(job) for job in jobs[:2]]
        raise KeyboardInterrupt(f"killed after {len(results)} units")

    def counting(jobs: list[UnitJob]) -> list[UnitResult]:
        results = []
        for job in jobs:
            if not (job.output / "result.json").is_file():
                encoded.append(job.index)
            results.append(encode_unit(job))
        return results

    settings = ShardSettings(seq_len=16)
    with pytest.raises(KeyboardInterrupt):
        build_shards(settings, corpus(corpus_dir), tokenizer, store, dies_after_two)
    assert not list((tmp_path / "shards").glob("[!.]*")), "nothing half-written is published"
    resumed = build_shards(settings, corpus(corpus_dir), tokenizer, store, counting)
    assert encoded == [2, 3, 4]
    fresh = build_shards(settings, corpus(corpus_dir), tokenizer, ArtifactStore(tmp_path / "f"))
    assert shard_bytes(resumed) == shard_bytes(fresh)
    assert not store.work_dir("shards", resumed.key).exists()


def test_an_input_deleted_while_it_is_read_leaves_no_work_folder(
    tmp_path: Path, corpus_dir: Path, tokenizer: ArtifactRef
) -> None:
    """The finished units are kept for a rerun with the same key; after an input error there is
    none (the same input fails again, a restored or fixed one has another key): they go."""
    copied = tmp_path / "corpus"
    shutil.copytree(corpus_dir, copied)
    store = ArtifactStore(tmp_path / "store")
    finished: list[bool] = []

    def deletes_a_file_midway(jobs: list[UnitJob]) -> list[UnitResult]:
        results = []
        for job in jobs:
            if job.index == 2:
                (copied / "part-3.txt").unlink()  # fault injected: deleted while the run reads
            results.append(encode_unit(job))
            finished.append((job.output / "result.json").is_file())
        return results

    with pytest.raises(CorpusInputError, match="deleted or moved while the run read it"):
        build_shards(
            ShardSettings(seq_len=16), corpus(copied), tokenizer, store, deletes_a_file_midway
        )
    assert finished[:3] == [True, True, True]  # units were written under the key's work folder
    assert not list((tmp_path / "store" / "shards").glob(".work-*"))


def test_max_documents_counts_across_files(
    tmp_path: Path, corpus_dir: Path, tokenizer: ArtifactRef
) -> None:
    ref = build_shards(
        ShardSettings(seq_len=16),
        corpus(corpus_dir, max_documents=150),
        tokenizer,
        ArtifactStore(tmp_path),
    )
    assert ref.outputs["train_documents"] + ref.outputs["validation_documents"] == 150


def test_an_empty_corpus_names_its_files_and_why_they_gave_nothing(
    tmp_path: Path, tokenizer: ArtifactRef
) -> None:
    (tmp_path / "short.txt").write_text("too short\n\nstill short\n")
    (tmp_path / "image.txt").write_bytes(b"\x89PNG\x00\x00")
    with pytest.raises(CorpusInputError) as raised:
        build_shards(ShardSettings(), corpus(tmp_path), tokenizer, ArtifactStore(tmp_path / "s"))
    message = str(raised.value)
    assert "image.txt" in message and "short.txt" in message
    assert "2 shorter than corpus.min_words=5" in message
    assert "1 binary files skipped" in message


def test_seen_keys_keeps_first_occurrences_across_calls() -> None:
    seen = SeenKeys()
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 300, size=100).astype(np.uint64) for _ in range(20)]
    expected_seen: set[int] = set()
    for keys in batches:
        expected = []
        for key in keys.tolist():
            expected.append(key not in expected_seen)
            expected_seen.add(key)
        assert seen.first_occurrences(keys).tolist() == expected
    assert sum(len(run) for run in seen.runs) == len(expected_seen)


def test_document_packed_batches_mask_padding_out_of_attention(
    tmp_path: Path, corpus_dir: Path, tokenizer: ArtifactRef
) -> None:
    import torch

    from lightning_modules.data.collator import MaskingCollator
    from lightning_modules.data.masking_rules import MaskingRule
    from lightning_modules.data.mlm_datamodule import MaskedLMDataModule
    from lightning_modules.models.config import EncoderConfig
    from lightning_modules.models.encoder import BertEncoder

    ref = build_shards(
        ShardSettings(seq_len=32, packing="document"),
        corpus(corpus_dir),
        tokenizer,
        ArtifactStore(tmp_path),
    )
    special = load_tokenizer(tokenizer).special
    collator = MaskingCollator(MaskingRule(), 150, special.mask, special.all(), seed=0)
    data = MaskedLMDataModule(ref.path, collator, batch_size=8, seed=0)
    data.setup()
    batch = next(iter(data.train_dataloader()))
    assert torch.equal(batch["attention_mask"], batch["input_ids"] != special.pad)
    assert not batch["attention_mask"].all()
    assert "attention_mask" in data.validation_set[0]

    encoder = BertEncoder(EncoderConfig(vocab_size=150, hidden_size=32, num_heads=2)).eval()
    row, mask = batch["input_ids"][:1], batch["attention_mask"][:1]
    length = int(mask.sum())
    with torch.no_grad():
        padded = encoder(row, mask)[0, :length]
        alone = encoder(row[:, :length])[0]
    torch.testing.assert_close(padded, alone)
