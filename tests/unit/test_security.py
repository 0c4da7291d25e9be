"""Safe defaults: local-only servers, weights as data, never code."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch

from flows.core.artifacts import ArtifactStore, file_sha256
from flows.corpora import CorpusSettings, open_corpus
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import LAST_CHECKPOINT, pretrain
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, train_tokenizer
from flows.stages.training_types import PretrainSettings
from flows.training.settings import TrainerSettings
from flows.ui import UiSettings, server_commands
from tests.fakes import GREEK_LETTERS, greek_text, on_this_machine

TINY = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
TWO_STEPS = on_this_machine(
    TrainerSettings(max_steps=2, warmup_steps=1, batch_size=4, val_every_steps=2, log_every_steps=1)
)


def test_the_ui_servers_listen_on_localhost_only(tmp_path: Path) -> None:
    settings = UiSettings(root=tmp_path, experiment="cloze", prefect_port=4200, mlflow_port=5000)
    commands = server_commands(settings)
    assert set(commands) == {"Prefect", "MLflow"}
    for command, _ in commands.values():
        assert command[command.index("--host") + 1] == "127.0.0.1"
        assert "0.0.0.0" not in command


class Payload:
    """Unpickling this runs code: what a tampered checkpoint would carry."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (str(self.marker),))  # type: ignore[return-value]


def test_artifacts_hold_no_pickles_and_a_tampered_checkpoint_runs_no_code(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "text.txt").write_text(greek_text(300, words=GREEK_LETTERS[:6], length=(20, 21)))
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(tmp_path / "text.txt")]))
    store = ArtifactStore(tmp_path / "store")
    tokenizer = train_tokenizer(TokenizerSettings(vocab_size=100), corpus, store)
    shards = build_shards(ShardSettings(seq_len=32), corpus, tokenizer, store)
    settings = PretrainSettings(TINY, ObjectiveSettings(), TWO_STEPS, 0)
    trained = pretrain(settings, shards, tokenizer, store)
    suffixes = {path.suffix for path in trained.path.rglob("*") if path.is_file()}
    assert suffixes <= {".safetensors", ".json"}, suffixes

    shutil.rmtree(trained.path)  # force a rebuild, which resumes from the planted checkpoint
    checkpoints = store.work_dir("pretrain", trained.key) / "checkpoints"
    checkpoints.mkdir(parents=True)
    marker = tmp_path / "code-ran"
    planted = checkpoints / LAST_CHECKPOINT
    torch.save({"state_dict": Payload(marker)}, planted)
    # Its checksum too, as a tamperer would write it: so it is the load that must refuse it.
    planted.with_name(planted.name + ".sha256").write_text(file_sha256(planted))
    with caplog.at_level(logging.WARNING, logger="flows.training.training_checkpoints"):
        retrained = pretrain(settings, shards, tokenizer, store)  # set aside, trained afresh
    assert not marker.exists() and not retrained.outputs["resumed"]
    assert f"checkpoint {planted} does not load" in caplog.text
