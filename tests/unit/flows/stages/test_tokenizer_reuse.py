"""`tokenizer.from_artifact`: continued pretraining keeps the vocabulary of its start model."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.core.artifacts import ArtifactStore
from flows.core.settings import ConfigError
from flows.corpora import CorpusSettings, open_corpus
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, load_tokenizer, train_tokenizer
from lightning_modules.data.shard_format import ShardIndex

GENERAL = "the river runs past the old mill and the town square every single morning"
DOMAIN = "mutations in the gene cause hereditary disease in patients with colon tumours"


def corpus(path: Path, sentence: str):
    path.write_text("\n\n".join(f"{sentence} {number}" for number in range(200)))
    return open_corpus(CorpusSettings(kind="files", paths=[str(path)]))


def test_reused_tokenizer_comes_from_the_pretrain_run_and_keys_the_new_shards(
    tmp_path: Path,
) -> None:
    store = ArtifactStore(tmp_path / "store")
    general = train_tokenizer(
        TokenizerSettings(vocab_size=120), corpus(tmp_path / "g.txt", GENERAL), store
    )
    pretrained = store.get_or_build(  # what the pretrain stage's manifest records
        "pretrain", "p1", lambda directory: {}, {"inputs": {"tokenizer": general.key}}
    )
    domain = corpus(tmp_path / "d.txt", DOMAIN)
    reuse = TokenizerSettings(vocab_size=120, from_artifact=str(pretrained.path))
    reused = train_tokenizer(reuse, domain, store)
    direct = train_tokenizer(TokenizerSettings(from_artifact=str(general.path)), domain, store)
    retrained = train_tokenizer(TokenizerSettings(vocab_size=120), domain, store)
    assert reused.key == direct.key == general.key and reused.path == general.path
    assert retrained.key != general.key
    assert (
        load_tokenizer(reused).tokenizer.get_vocab()
        == load_tokenizer(general).tokenizer.get_vocab()
    )
    shards = build_shards(ShardSettings(seq_len=32), domain, reused, store)
    assert ShardIndex.load(shards.path).tokenizer_key == general.key


def test_a_directory_that_is_no_artifact_is_a_config_error(tmp_path: Path) -> None:
    settings = TokenizerSettings(from_artifact=str(tmp_path))
    with pytest.raises(
        ConfigError, match=r"tokenizer\.from_artifact=.* is not a published artifact"
    ):
        train_tokenizer(settings, corpus(tmp_path / "d.txt", DOMAIN), ArtifactStore(tmp_path / "s"))
