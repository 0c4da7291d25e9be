"""Every artifact kind is verified before reuse; paths read back from the store stay inside it;
a damaged artifact is set aside and recomputed (the store-fault table)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch

from flows.core.artifacts import MANIFEST_FILE, ArtifactError, ArtifactRef, ArtifactStore
from flows.corpora import CorpusSettings, open_corpus
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TOKENIZER_FILE, TokenizerSettings, train_tokenizer
from lightning_modules.data.shard_format import INDEX_FILE, CorruptShardError, ShardIndex
from lightning_modules.models.config import WEIGHTS_FILE
from lightning_modules.models.serialization import read_weights, save_weights

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


# --- The store-fault table: damage done to published artifacts, one row each. ---------------
# Each row damages a real tokenizer, shard set or weights artifact; the next run of the stage
# must refuse to reuse it, set it aside (`.corrupt-*`, named in a warning) and recompute, with
# nothing for a human to clean up, and never read the file a link points at.


@dataclass(frozen=True)
class StoreFault:
    name: str
    stage: str  # which artifact the row damages: tokenizer, shards or weights
    damage: Callable[[Path, Path], None]  # (the artifact's folder, a folder outside the store)
    warning: str  # what the quarantine warning must say


def outside_copy(path: Path, outside: Path) -> None:
    """Replaces `path` by a link to an identical copy outside the store."""
    copy = outside / path.name
    shutil.copyfile(path, copy)
    path.unlink()
    path.symlink_to(copy)


def drop_checksums_and_flip(folder: Path, outside: Path) -> None:
    manifest = folder / MANIFEST_FILE
    recorded = json.loads(manifest.read_text())
    del recorded["checksums"]
    manifest.write_text(json.dumps(recorded))
    flip_last_byte(
        next(
            path
            for path in sorted(folder.rglob("*"))
            if path.suffix == ".bin" or path.name in (WEIGHTS_FILE, TOKENIZER_FILE)
        )
    )


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


STORE_FAULTS = [
    StoreFault(
        "manifest without checksums, weights flipped beside it",
        "weights",
        drop_checksums_and_flip,
        r"manifest\.json records no checksums \('checksums'\): its files cannot be verified",
    ),
    StoreFault(
        "manifest without checksums, a shard flipped beside it",
        "shards",
        drop_checksums_and_flip,
        r"records no checksums",
    ),
    StoreFault(
        "a recorded file deleted",
        "tokenizer",
        lambda folder, _: (folder / TOKENIZER_FILE).unlink(),
        rf"{TOKENIZER_FILE} is missing \(recorded in .*manifest\.json\)",
    ),
    StoreFault(
        "a file the manifest does not record",
        "weights",
        lambda folder, _: (folder / "extra.bin").write_bytes(b"\0"),
        r"extra\.bin has no checksum in .*manifest\.json: it cannot be verified",
    ),
    StoreFault(
        "a shard replaced by a link to an identical copy outside the store",
        "shards",
        lambda folder, outside: outside_copy(folder / "train-00000.bin", outside),
        r"train-00000\.bin is a symbolic link \(to '.*outside/train-00000\.bin'\); an artifact "
        r"holds only its own files: refused",
    ),
    StoreFault(
        "shards.json replaced by a link to an identical copy outside the store",
        "shards",
        lambda folder, outside: outside_copy(folder / INDEX_FILE, outside),
        r"shards\.json is a symbolic link",
    ),
    StoreFault(
        "tokenizer.json replaced by a link to an identical copy outside the store",
        "tokenizer",
        lambda folder, outside: outside_copy(folder / TOKENIZER_FILE, outside),
        r"tokenizer\.json is a symbolic link",
    ),
    StoreFault(
        "weights replaced by a link to an identical copy outside the store",
        "weights",
        lambda folder, outside: outside_copy(folder / WEIGHTS_FILE, outside),
        rf"{WEIGHTS_FILE} is a symbolic link",
    ),
    StoreFault(
        "a FIFO in place of a shard",
        "shards",
        lambda folder, _: (
            (folder / "train-00000.bin").unlink(),
            os.mkfifo(folder / "train-00000.bin"),
        ),
        r"train-00000\.bin is not a plain file; refused",
    ),
    StoreFault(
        "the artifact folder replaced by a link to a copy outside the store",
        "weights",
        lambda folder, outside: (
            shutil.copytree(folder, outside / "copy"),
            shutil.rmtree(folder),
            folder.symlink_to(outside / "copy"),
        ),
        r"links to '.*copy', which is not a key in .*; refused",
    ),
]


def build_weights(directory: Path) -> dict:
    save_weights(torch.nn.Linear(4, 4), directory / WEIGHTS_FILE)
    return {}


@pytest.mark.parametrize("fault", STORE_FAULTS, ids=[fault.name for fault in STORE_FAULTS])
def test_a_damaged_artifact_is_set_aside_and_recomputed(
    tmp_path: Path, fault: StoreFault, caplog: pytest.LogCaptureFixture
) -> None:
    store, outside = ArtifactStore(tmp_path / "store"), tmp_path / "outside"
    outside.mkdir()
    text, settings = corpus(tmp_path / "c.txt"), TokenizerSettings(vocab_size=120)

    def produce() -> ArtifactRef:
        if fault.stage == "weights":
            return store.get_or_build("pretrain", "p1", build_weights, {})
        tokenizer = train_tokenizer(settings, text, store)
        if fault.stage == "tokenizer":
            return tokenizer
        return build_shards(ShardSettings(seq_len=16), text, tokenizer, store)

    first = produce()
    fault.damage(first.path, outside)
    outside_before = {path.name: path.read_bytes() for path in outside.rglob("*") if path.is_file()}
    with caplog.at_level(logging.WARNING, logger="flows.core.artifacts"):
        again = produce()
    assert not again.cache_hit and again.key == first.key
    assert re.search(fault.warning, caplog.text), caplog.text
    [aside] = (tmp_path / "store").glob(f"*/.corrupt-{first.key}-*")
    assert aside.is_symlink() or aside.is_dir()
    assert store.lookup(again.stage, again.key) == replace(again, cache_hit=True)
    assert {path.name: path.read_bytes() for path in outside.rglob("*") if path.is_file()} == (
        outside_before
    )


def test_a_tokenizer_link_out_of_the_store_is_set_aside_by_the_clean_up_itself(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The input key's link names a path outside the store: refused, moved aside, relinked."""
    store, settings = ArtifactStore(tmp_path / "store"), TokenizerSettings(vocab_size=120)
    text = corpus(tmp_path / "c.txt")
    built = train_tokenizer(settings, text, store)
    [link] = [entry for entry in built.path.parent.iterdir() if entry.is_symlink()]
    link.unlink()
    os.symlink("../../../../etc", link)
    with caplog.at_level(logging.WARNING, logger="flows.core.artifacts"):
        again = train_tokenizer(settings, text, store)
    assert again.key == built.key and again.cache_hit  # its content was never damaged
    assert "links to '../../../../etc', which is not a key" in caplog.text
    assert os.readlink(link) == built.key
    [aside] = link.parent.glob(f".corrupt-{link.name}-*")
    assert os.readlink(aside) == "../../../../etc"
