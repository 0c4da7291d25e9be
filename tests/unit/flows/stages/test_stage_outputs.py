"""Typed stage outputs keep the manifest's flat JSON: stores already on disk keep loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.core.artifacts import ArtifactRef
from flows.corpora.stats import CorpusStats
from flows.stages.shards.stage import ShardOutputs
from flows.stages.tokenizer import TokenizerOutputs
from flows.stages.training_types import PretrainOutputs

# The flat `outputs` of a shards manifest as the stage wrote it before it was typed.
SHARDS_MANIFEST = {
    **{
        f"{split}_{name}": 3
        for split in ("train", "validation")
        for name in ("documents", "tokens", "sequences", "shards", "dropped_tokens")
    },
    **{f"corpus_{name}": 1 for name in CorpusStats().as_dict()},
    "units": 2,
    "seq_len": 64,
    "dtype": "uint16",
}
PRETRAIN_MANIFEST = {
    "initial_val_loss": 9.1,
    "val_loss": 7.5,
    "val_accuracy": 0.1,
    "val_perplexity": 1808.0,
    "steps": 20,
    "train_tokens": 40960,
    "fit_seconds": 12.5,
    "parameters": 1000,
    "resumed": False,
    "huggingface_export": True,
    "kept_checkpoints": {"1": {"steps": 20, "tokens": 40960}},
}


REPLAY_COUNTS = {
    "train_domain_tokens": 0,
    "train_replay_tokens": 0,
    "train_replay_documents": 0,
    "replay_available_tokens": 0,
}


def test_shard_outputs_read_and_write_the_flat_manifest() -> None:
    """A manifest from before replay reads its per-source counts as 0, and writes them."""
    outputs = ShardOutputs.from_manifest(SHARDS_MANIFEST)
    assert outputs.corpus == CorpusStats(*[1] * len(CorpusStats().as_dict()))
    assert outputs.train_documents == 3 and outputs.dtype == "uint16"
    assert outputs.to_manifest() == {**SHARDS_MANIFEST, **REPLAY_COUNTS}
    assert outputs.replay_share == 0.0
    replayed = {**SHARDS_MANIFEST, "train_domain_tokens": 90, "train_replay_tokens": 10}
    assert ShardOutputs.from_manifest(replayed).replay_share == 0.1


def test_a_shards_manifest_from_before_a_corpus_count_existed_reads_it_as_zero() -> None:
    older = {k: v for k, v in SHARDS_MANIFEST.items() if k != "corpus_dropped_task_validation"}
    assert ShardOutputs.from_manifest(older).corpus.dropped_task_validation == 0


def test_pretrain_outputs_keep_the_objectives_metrics_flat() -> None:
    outputs = PretrainOutputs.from_manifest({**PRETRAIN_MANIFEST, "key": "k", "cache_hit": True})
    assert outputs.val_loss == 7.5
    assert outputs.validation == {"val_loss": 7.5, "val_accuracy": 0.1, "val_perplexity": 1808.0}
    assert outputs.to_manifest() == PRETRAIN_MANIFEST


def test_a_missing_figure_is_named() -> None:
    with pytest.raises(ValueError, match=r"tokenizer outputs lack \['unknown_rate'\]"):
        TokenizerOutputs.from_manifest(
            {
                "vocab_size": 100,
                "training_seconds": 1.0,
                "corpus_documents": 5,
                "fertility": 1.2,
                "heldout_documents": 2,
            }
        )


def test_outputs_are_read_from_an_artifact_of_their_own_stage_only() -> None:
    ref = ArtifactRef("pretrain", "k" * 20, Path("/store/pretrain/k"), PRETRAIN_MANIFEST, True)
    assert PretrainOutputs.of(ref).steps == 20
    with pytest.raises(ValueError, match="is a pretrain artifact, not shards"):
        ShardOutputs.of(ref)
