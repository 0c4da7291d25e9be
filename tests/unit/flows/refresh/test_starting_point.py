"""Where a domain refresh starts: the champion, once there is one, with its tokenizer.

Before the first champion a refresh starts where `pretrain.init_from` points (the slow test,
tests/integration/test_cloze_refresh.py, continues a `transformers` checkpoint); a pretrain
artifact named there must be one, and is refused by name otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.core.settings import ConfigError
from flows.refresh.flow import champion_start, published_pretrain
from flows.tracking.runs import Tracker


def publish(store: ArtifactStore, stage: str, inputs: dict[str, Any]) -> ArtifactRef:
    """A published artifact of `stage` holding one file, with `inputs` in its record."""
    record = {"settings": {"stage": stage}, "inputs": inputs}

    def build(out: Path) -> dict[str, Any]:
        (out / "weights.txt").write_text(stage)
        return {}

    return store.get_or_build(stage, stage_key(stage, 1, record["settings"], inputs), build, record)


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


@pytest.fixture
def tracker(tmp_path: Path) -> Tracker:
    return Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "refresh", tmp_path / "mlartifacts")


def test_before_the_first_champion_there_is_none_to_continue(
    tracker: Tracker, store: ArtifactStore
) -> None:
    assert champion_start(tracker, store, "cloze-legal") is None


def test_a_pretrain_artifact_is_read_from_the_store_it_lives_in(store: ArtifactStore) -> None:
    tokenizer = publish(store, "tokenizer", {})
    pretrained = publish(store, "pretrain", {"tokenizer": tokenizer.key})
    found = published_pretrain(pretrained.path)
    assert (found.stage, found.key, found.path) == ("pretrain", pretrained.key, pretrained.path)


def test_what_is_not_a_pretrain_artifact_is_refused_by_name(
    store: ArtifactStore, tmp_path: Path
) -> None:
    tokenizer = publish(store, "tokenizer", {})
    plain = tmp_path / "exported-model"
    plain.mkdir()
    for path in (tokenizer.path, plain):
        with pytest.raises(ConfigError, match="is not a published pretrain artifact") as error:
            published_pretrain(path)
        assert str(path) in str(error.value)
