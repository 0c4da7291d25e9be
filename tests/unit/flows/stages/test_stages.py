"""Tokenizer and shards stages on a small corpus written by the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.core.artifacts import ArtifactStore
from flows.corpora import CorpusSettings, open_corpus
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, load_tokenizer, train_tokenizer
from lightning_modules.data.packed_dataset import PackedSequenceDataset
from lightning_modules.data.shard_format import ShardIndex
from tests.fakes import GREEK_LETTERS


def corpus_for(path: Path):
    return open_corpus(CorpusSettings(kind="files", paths=[str(path)]))


def test_tokenizer_covers_its_corpus_and_records_stats(
    tmp_path: Path, greek_corpus: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    ref = train_tokenizer(
        TokenizerSettings(vocab_size=200), corpus_for(greek_corpus), ArtifactStore(tmp_path)
    )
    # The trainer's progress bars printed six blank lines off a terminal, at every run's start.
    assert capfd.readouterr().out == ""
    trained = load_tokenizer(ref)
    assert ref.outputs["unknown_rate"] == 0.0
    assert 1.0 <= ref.outputs["fertility"] < 3.0
    assert trained.special.pad == 0 and trained.special.mask == 4
    encoding = trained.tokenizer.encode("alpha omega")
    assert encoding.ids[0] == trained.special.cls and encoding.ids[-1] == trained.special.sep


def test_shards_are_byte_identical_given_the_same_tokenizer(
    tmp_path: Path, greek_corpus: Path
) -> None:
    tokenizer = train_tokenizer(
        TokenizerSettings(vocab_size=200), corpus_for(greek_corpus), ArtifactStore(tmp_path / "tok")
    )
    settings = ShardSettings(seq_len=32, sequences_per_shard=50)
    first = build_shards(
        settings, corpus_for(greek_corpus), tokenizer, ArtifactStore(tmp_path / "a")
    )
    second = build_shards(
        ShardSettings(seq_len=32, sequences_per_shard=50, batch_documents=7),
        corpus_for(greek_corpus),
        tokenizer,
        ArtifactStore(tmp_path / "b"),
    )
    assert first.key == second.key
    files = sorted(p.name for p in first.path.glob("*.bin"))
    assert len(files) > 2
    for name in files:
        assert (first.path / name).read_bytes() == (second.path / name).read_bytes()
    assert first.outputs["train_sequences"] > 0 and first.outputs["validation_sequences"] > 0


def test_shards_decode_back_to_the_corpus_text(tmp_path: Path, greek_corpus: Path) -> None:
    store = ArtifactStore(tmp_path)
    tokenizer = train_tokenizer(TokenizerSettings(vocab_size=200), corpus_for(greek_corpus), store)
    shards = build_shards(ShardSettings(seq_len=32), corpus_for(greek_corpus), tokenizer, store)
    index = ShardIndex.load(shards.path)
    assert index.dtype == "uint16" and index.tokenizer_key == tokenizer.key
    first = PackedSequenceDataset(shards.path, index, "train")[0]
    decoded = load_tokenizer(tokenizer).tokenizer.decode(first.tolist(), skip_special_tokens=True)
    words = decoded.split()
    assert len(words) > 5 and set(words) <= set(GREEK_LETTERS)


def test_a_corrupt_shard_is_rebuilt_on_the_next_run(tmp_path: Path, greek_corpus: Path) -> None:
    store = ArtifactStore(tmp_path)
    tokenizer = train_tokenizer(TokenizerSettings(vocab_size=200), corpus_for(greek_corpus), store)
    shards = build_shards(ShardSettings(seq_len=32), corpus_for(greek_corpus), tokenizer, store)
    shard = shards.path / "train-00000.bin"
    original = shard.read_bytes()
    shard.write_bytes(b"\x00" + original[1:])
    rebuilt = build_shards(ShardSettings(seq_len=32), corpus_for(greek_corpus), tokenizer, store)
    assert not rebuilt.cache_hit
    assert (rebuilt.path / "train-00000.bin").read_bytes() == original


def test_an_empty_corpus_fails_and_publishes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "tiny.txt"
    path.write_text("too short\n\nalso short\n")
    store = ArtifactStore(tmp_path / "store")
    with pytest.raises(ValueError, match="the corpus is empty after cleaning"):
        train_tokenizer(TokenizerSettings(vocab_size=200), corpus_for(path), store)
    assert not list((tmp_path / "store" / "tokenizer").glob("[!.]*"))


@pytest.mark.parametrize(
    ("kind", "specials"),
    [
        ("bpe", {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>", "mask": "<mask>"}),
        (
            "unigram",
            {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
        ),
    ],
)
def test_bpe_and_unigram_tokenizers_train_shard_and_round_trip(
    tmp_path: Path, greek_corpus: Path, kind: str, specials: dict[str, str]
) -> None:
    store = ArtifactStore(tmp_path)
    settings = TokenizerSettings(kind=kind, vocab_size=150, special_tokens=specials)
    ref = train_tokenizer(settings, corpus_for(greek_corpus), store)
    trained = load_tokenizer(ref)
    assert trained.settings.kind == kind
    assert ref.outputs["unknown_rate"] == 0.0
    encoding = trained.tokenizer.encode("alpha omega")
    assert encoding.ids[0] == trained.special.cls and encoding.ids[-1] == trained.special.sep
    decoded = trained.tokenizer.decode(encoding.ids, skip_special_tokens=True)
    assert decoded.split() == ["alpha", "omega"]
    shards = build_shards(ShardSettings(seq_len=32), corpus_for(greek_corpus), ref, store)
    assert shards.outputs["train_sequences"] > 10
