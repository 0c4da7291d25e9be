"""Replay (`corpus.replay`): a share of general text packed into the training rows, keyed, counted
per source, the same bytes for the same config, and the corpus's own rows left as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.corpora import Corpus, CorpusSettings, open_corpus
from flows.corpora.formats import CorpusInputError
from flows.corpora.replay import ReplaySettings
from flows.stages.shards.stage import ShardOutputs, ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, load_tokenizer, train_tokenizer
from flows.summary import stage_figures
from lightning_modules.data.packed_dataset import PackedSequenceDataset
from lightning_modules.data.shard_format import ShardIndex
from tests.fakes import greek_text

SEQ_LEN = 32


@pytest.fixture(scope="module")
def general(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four files of general text: other paragraphs than the corpus's, about 8,000 tokens."""
    directory = tmp_path_factory.mktemp("general")
    for index in range(4):
        (directory / f"wiki_{index:02d}.txt").write_text(
            greek_text(80, seed=100 + index, length=(8, 30))
        )
    return directory


@pytest.fixture(scope="module")
def tokenizer(greek_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> ArtifactRef:
    store = ArtifactStore(tmp_path_factory.mktemp("tokenizer"))
    return train_tokenizer(TokenizerSettings(vocab_size=150), corpus(greek_corpus), store)


def corpus(path: Path, replay: dict[str, Any] | None = None) -> Corpus:
    settings = None if replay is None else ReplaySettings(**replay)
    return open_corpus(CorpusSettings(kind="files", paths=[str(path)], replay=settings))


def shards(
    root: Path, text: Corpus, tokenizer: ArtifactRef, **settings: Any
) -> tuple[ArtifactRef, ShardOutputs]:
    ref = build_shards(
        ShardSettings(seq_len=SEQ_LEN, **settings), text, tokenizer, ArtifactStore(root)
    )
    return ref, ShardOutputs.of(ref)


def rows(ref: ArtifactRef, split: str = "train") -> np.ndarray:
    dataset = PackedSequenceDataset(ref.path, ShardIndex.load(ref.path), split)
    return np.stack([dataset[i].numpy() for i in range(len(dataset))])


def shard_bytes(ref: ArtifactRef) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(ref.path.glob("*.bin"))}


def test_corpus_replay_changes_the_shards_key_and_their_per_source_token_counts(
    tmp_path: Path, greek_corpus: Path, general: Path, tokenizer: ArtifactRef
) -> None:
    plain_ref, plain = shards(tmp_path / "plain", corpus(greek_corpus), tokenizer)
    mixed_ref, mixed = shards(
        tmp_path / "mixed",
        corpus(greek_corpus, {"paths": [str(general)], "share": 0.1}),
        tokenizer,
    )
    assert mixed_ref.key != plain_ref.key
    assert plain.train_replay_tokens == plain.train_replay_documents == 0
    assert mixed.train_domain_tokens == plain.train_domain_tokens == plain.train_tokens
    assert mixed.train_replay_tokens > 0 and mixed.train_replay_documents > 0
    assert mixed.train_tokens == plain.train_tokens + mixed.train_replay_tokens
    assert mixed.train_documents == plain.train_documents + mixed.train_replay_documents
    assert mixed.replay_available_tokens > mixed.train_replay_tokens  # a sample, not all of it
    # The corpus's rows are those of a run without replay; the replay's follow them, and
    # validation stays the corpus's alone.
    assert (rows(mixed_ref)[: plain.train_sequences] == rows(plain_ref)).all()
    assert mixed.train_sequences > plain.train_sequences
    assert (rows(mixed_ref, "validation") == rows(plain_ref, "validation")).all()
    # The summary line says the share per source.
    share = mixed.replay_share
    assert stage_figures("shards", mixed_ref.outputs) == (
        f"train {mixed.train_sequences} x {SEQ_LEN} tokens in 1 shard(s) (domain "
        f"{1 - share:.1%}, replay {share:.1%}), validation {mixed.validation_sequences}"
    )
    assert "replay" not in stage_figures("shards", plain_ref.outputs)


@pytest.mark.parametrize("packing", ["concat", "document"])
@pytest.mark.parametrize("share", [0.1, 0.25])
def test_the_replay_share_of_the_training_tokens_is_the_configured_share(
    tmp_path: Path,
    greek_corpus: Path,
    general: Path,
    tokenizer: ArtifactRef,
    packing: str,
    share: float,
) -> None:
    """Measured on the rows' bytes: the tokens of the replay's rows over all rows' tokens."""
    _, plain = shards(tmp_path / "plain", corpus(greek_corpus), tokenizer, packing=packing)
    ref, mixed = shards(
        tmp_path / "mixed",
        corpus(greek_corpus, {"paths": [str(general)], "share": share}),
        tokenizer,
        packing=packing,
    )
    special = load_tokenizer(tokenizer).special
    train = rows(ref)
    text = ~np.isin(train, [special.cls, special.sep, special.pad])
    replay_tokens = int(text[plain.train_sequences :].sum())
    measured = replay_tokens / int(text.sum())
    assert measured == pytest.approx(share, abs=0.003)
    assert mixed.replay_share == pytest.approx(measured, abs=0.002)
    if packing == "document":  # one row per document, truncated: the counts are the rows'
        assert replay_tokens == mixed.train_replay_tokens
        assert len(train) - plain.train_sequences == mixed.train_replay_documents


def test_the_same_config_gives_the_same_shard_bytes_whatever_the_workers(
    tmp_path: Path, greek_corpus: Path, general: Path, tokenizer: ArtifactRef
) -> None:
    replay = {"paths": [str(general)], "share": 0.2}
    one, _ = shards(tmp_path / "one", corpus(greek_corpus, replay), tokenizer)
    two, _ = shards(
        tmp_path / "two", corpus(greek_corpus, replay), tokenizer, num_workers=2, batch_documents=7
    )
    assert one.key == two.key
    assert shard_bytes(one) == shard_bytes(two) and len(shard_bytes(one)) == 2


def test_the_replay_is_keyed_by_its_content_share_and_format_but_not_its_paths(
    tmp_path: Path, greek_corpus: Path, general: Path
) -> None:
    """The tokenizer never reads the replay, so only the shards' key (and what follows) moves."""
    moved = tmp_path / "moved.txt"
    moved.write_text("\n\n".join(path.read_text() for path in sorted(general.glob("*.txt"))))
    (tmp_path / "other.txt").write_text(greek_text(50, seed=7))

    def keyed(**replay: Any) -> dict[str, Any]:
        text = corpus(greek_corpus, {"paths": [str(moved)], "share": 0.1, **replay})
        assert text.replay is not None
        assert text.fingerprint() == corpus(greek_corpus).fingerprint()  # the tokenizer's input
        return text.replay.fingerprint()

    base = keyed()
    assert keyed(paths=[f"{tmp_path}/m*.txt"]) == base  # another spelling, the same file
    assert keyed(share=0.2) != base
    assert keyed(format="wikiextractor") != base
    assert keyed(paths=[str(tmp_path / "other.txt")]) != base


def test_replayed_text_the_corpus_already_holds_is_dropped_as_a_duplicate(
    tmp_path: Path, greek_corpus: Path, tokenizer: ArtifactRef
) -> None:
    """Deduplicated against the corpus (validation documents included): a replay that only
    repeats the corpus offers nothing, and is refused rather than repeated."""
    with pytest.raises(CorpusInputError, match=r"hold 0 after cleaning and dedupe"):
        shards(tmp_path, corpus(greek_corpus, {"paths": [str(greek_corpus)]}), tokenizer)
