"""`pretrain.init_from` naming weights (`InitPoint.of_artifact`): their identity enters the stage
key; a misfit fails clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from flows.core.artifacts import ArtifactRef
from flows.core.settings import ConfigError
from flows.stages.init_point import InitPoint
from flows.stages.init_weights import check_loadable, check_same_tokenizer, load_initial_weights
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.models.serialization import save_masked_lm


def tiny(vocab_size: int = 120) -> BertForMaskedLM:
    return BertForMaskedLM(
        EncoderConfig(vocab_size, hidden_size=16, num_heads=2, intermediate_size=32)
    )


def saved(directory: Path, model: BertForMaskedLM, key: str | None = None) -> Path:
    directory.mkdir()
    save_masked_lm(model, directory)
    if key is not None:
        (directory / "manifest.json").write_text(json.dumps({"stage": "pretrain", "key": key}))
    return directory


def test_weights_are_copied_and_identified_by_content_not_path(tmp_path: Path) -> None:
    torch.manual_seed(0)
    source = tiny()
    init = InitPoint.of_artifact(saved(tmp_path / "a", source))
    moved = InitPoint.of_artifact(saved(tmp_path / "b", source))
    assert moved.identity == init.identity  # same weights, other path
    retrained = tiny()
    other = InitPoint.of_artifact(saved(tmp_path / "c", retrained))
    assert other.identity != init.identity
    published = InitPoint.of_artifact(saved(tmp_path / "d", source, key="abc123"))
    assert published.identity == "pretrain:abc123"
    assert (published.kind, published.weights, published.lineage) == (
        "artifact",
        (tmp_path / "d").resolve(),
        None,  # trained here, from random init: no checkpoint behind it
    )

    target = tiny()
    load_initial_weights(target, init)
    for name, tensor in source.state_dict().items():
        assert torch.equal(target.state_dict()[name], tensor), name


def test_a_different_vocabulary_or_a_missing_artifact_is_a_clear_error(tmp_path: Path) -> None:
    init = InitPoint.of_artifact(saved(tmp_path / "a", tiny(vocab_size=120)))
    with pytest.raises(ConfigError, match=r"vocab_size=120 \(this run: 200\).*same vocabulary"):
        load_initial_weights(tiny(vocab_size=200), init)
    with pytest.raises(ConfigError, match="is not a pretrain artifact directory"):
        check_loadable(InitPoint.of_artifact(tmp_path / "missing"))
    assert InitPoint.of_adopted(None).weights is None  # from scratch: no weights to load


def test_weights_trained_with_another_tokenizer_are_refused(tmp_path: Path) -> None:
    source = saved(tmp_path / "a", tiny(), key="abc123")
    manifest = source / "manifest.json"
    manifest.write_text(
        json.dumps({"stage": "pretrain", "key": "abc123", "inputs": {"tokenizer": "tok-old"}})
    )
    init = InitPoint.of_artifact(source)

    def tokenizer(key: str) -> ArtifactRef:
        return ArtifactRef("tokenizer", key, tmp_path / key, {}, cache_hit=True)

    check_same_tokenizer(init, tokenizer("tok-old"))  # the same vocabulary: fine
    with pytest.raises(
        ConfigError,
        match=rf"trained with tokenizer tok-old, this run's tokenizer is tok-new.*"
        rf"tokenizer.from_artifact={source}",
    ):
        check_same_tokenizer(init, tokenizer("tok-new"))
