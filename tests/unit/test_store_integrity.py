"""Every artifact kind is verified before reuse; paths read back from the store stay inside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from flows.core.artifacts import ArtifactError, ArtifactStore
from flows.corpora import CorpusSettings, open_corpus
from flows.stages.tokenizer import TOKENIZER_FILE, TokenizerSettings, train_tokenizer
from lightning_modules.data.shard_format import INDEX_FILE, CorruptShardError, ShardIndex
from lightning_modules.models.serialization import WEIGHTS_FILE, read_weights, save_weights

TEXT = "the river runs past the old mill and the town square every single morning"


def corpus(path: Path):
    path.write_text("\n\n".join(f"{TEXT} {number}" for number in range(200)))
    return open_corpus(CorpusSettings(kind="files", paths=[str(path)]))


def test_a_tokenizer_with_swapped_ids_is_caught_and_retrained(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    settings, text = TokenizerSettings(vocab_size=120), corpus(tmp_path / "c.txt")
    trained = train_tokenizer(settings, text, store)
    file = trained.path / TOKENIZER_FILE
    vocab = json.loads(file.read_text())
    words = vocab["model"]["vocab"]
    first, second = list(words)[10:12]
    words[first], words[second] = words[second], words[first]
    file.write_text(json.dumps(vocab))
    with pytest.raises(ArtifactError, match=f"{file} does not match the checksum"):
        store.lookup("tokenizer", trained.key)
    again = train_tokenizer(settings, text, store)
    assert not again.cache_hit and again.key == trained.key


def test_a_flipped_byte_in_published_weights_is_caught(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)

    def build(directory: Path) -> dict:
        save_weights(torch.nn.Linear(4, 4), directory / WEIGHTS_FILE)
        return {}

    ref = store.get_or_build("pretrain", "p1", build, {})
    weights = ref.path / WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=f"{weights} does not match"):
        store.lookup("pretrain", "p1")


def test_a_corrupt_safetensors_header_names_the_file(tmp_path: Path) -> None:
    weights = tmp_path / WEIGHTS_FILE
    save_weights(torch.nn.Linear(4, 4), weights)
    weights.write_bytes(b"\xff" * 8 + weights.read_bytes()[8:])
    with pytest.raises(ValueError, match=f"{weights} is not a readable safetensors file"):
        read_weights(weights)


@pytest.mark.parametrize("name", ["../../outside.bin", "/etc/passwd", "..", "sub/shard.bin"])
def test_a_shard_index_naming_a_file_outside_its_folder_is_refused(
    tmp_path: Path, name: str
) -> None:
    index = {
        "seq_len": 8,
        "vocab_size": 100,
        "dtype": "uint16",
        "tokenizer_key": "t",
        "splits": {"train": [{"file": name, "sequences": 1, "sha256": "0" * 64}]},
    }
    (tmp_path / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(CorruptShardError, match="not a plain file name"):
        ShardIndex.load(tmp_path)


def test_a_manifest_naming_a_tokenizer_key_outside_the_store_is_refused(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    crafted = store.get_or_build(
        "pretrain", "p1", lambda directory: {}, {"inputs": {"tokenizer": "../../elsewhere"}}
    )
    settings = TokenizerSettings(from_artifact=str(crafted.path))
    with pytest.raises(ArtifactError, match=r"manifest\.json records tokenizer key .*refused"):
        train_tokenizer(settings, corpus(tmp_path / "c.txt"), store)
