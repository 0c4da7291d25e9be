"""A checkpoint's weights are checked against its config.json from the files' headers, before
any stage: every family's own checkpoint passes; a contradicting shape, a missing layer or a
truncated file is one CheckpointError naming the files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lightning_modules.transformers_import import CheckpointError, peek_checkpoint
from lightning_modules.transformers_import.families import FAMILIES
from lightning_modules.transformers_import.preflight import check_weights
from tests.checkpoints import tiny_checkpoint


def edit_config(folder: Path, **changes: Any) -> Path:
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**hf, **changes}))
    return folder


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_every_familys_own_checkpoint_passes(model_type: str, tmp_path: Path) -> None:
    check_weights(peek_checkpoint(tiny_checkpoint(model_type, tmp_path, scale=0)))


@pytest.mark.parametrize("weights", ["sharded", "bin"])
def test_shards_and_pickled_weights_pass(weights: str, tmp_path: Path) -> None:
    check_weights(peek_checkpoint(tiny_checkpoint("bert", tmp_path, scale=0, weights=weights)))


def test_a_headless_checkpoint_passes(tmp_path: Path) -> None:
    folder = tiny_checkpoint("bert", tmp_path, scale=0, architecture="BertModel")
    check_weights(peek_checkpoint(folder))


def truncated(folder: Path) -> Path:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    return folder


def header_only(folder: Path) -> Path:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:6])
    return folder


REFUSED = {
    "a width config.json contradicts": (
        lambda d: edit_config(d, hidden_size=64, intermediate_size=37),
        r"config\.json contradicts .*model\.safetensors: bert\.embeddings\.word_embeddings\.weight"
        r" is \[99, 32\], not \[99, 64\]",
    ),
    "a vocabulary config.json contradicts": (
        lambda d: edit_config(d, vocab_size=120),
        r"word_embeddings\.weight is \[99, 32\], not \[120, 32\]",
    ),
    "more layers than the weights hold": (
        lambda d: edit_config(d, num_hidden_layers=3),
        r"BertForMaskedLM tensors config\.json describes are missing: "
        r"bert\.encoder\.layer\.2\.attention",
    ),
    "truncated weights": (truncated, r"model\.safetensors is truncated: its header lists \d+"),
    "a file cut inside its header": (header_only, r"model\.safetensors is not a readable"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_weights_that_do_not_fit_their_config_are_refused(case: str, tmp_path: Path) -> None:
    breaks, message = REFUSED[case]
    folder = breaks(tiny_checkpoint("bert", tmp_path, scale=0))
    with pytest.raises(CheckpointError, match=message):
        check_weights(peek_checkpoint(folder))
