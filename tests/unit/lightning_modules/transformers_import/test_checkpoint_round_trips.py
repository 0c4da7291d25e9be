"""Import and export are one map read both ways: Cloze's own exports import back exactly, a
trained sinusoid survives, and reading a checkpoint needs neither `transformers` nor `flows`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer

from lightning_modules.export import export_huggingface, write_weights
from lightning_modules.models.config import EncoderConfig
from lightning_modules.transformers_import import export_like, read_checkpoint
from tests.checkpoints import tiny_checkpoint
from tests.fakes import MODERNBERT_OPTIONS, REPO, SPECIALS, perturbed, tiny_tokenizer

SMALL = {"hidden_size": 32, "num_layers": 2, "num_heads": 4, "intermediate_size": 48}


@pytest.mark.parametrize(
    ("options", "architecture"),
    [
        ({"activation": "gelu_tanh", "tie_word_embeddings": False}, "BertForMaskedLM"),
        ({"share_layers": True}, "AlbertForMaskedLM"),  # ALBERT at equal widths: an identity map
        ({"embedding_size": 16}, "ElectraForMaskedLM"),
        ({"position_embedding": "rotary"}, "RoFormerForMaskedLM"),
        ({**MODERNBERT_OPTIONS, "num_layers": 4, "local_attention": 8}, "ModernBertForMaskedLM"),
    ],
)
def test_clozes_own_export_imports_back_to_the_same_model(
    options: dict[str, Any], architecture: str, tmp_path: Path
) -> None:
    tokenizer = tiny_tokenizer(tmp_path / "tokenizer.json")
    vocab = Tokenizer.from_file(str(tokenizer)).get_vocab_size()
    model = perturbed(EncoderConfig(vocab_size=vocab, **{**SMALL, **options}))
    export_huggingface(model, tokenizer, SPECIALS, "wordpiece", True, tmp_path / "hf")
    imported = read_checkpoint(tmp_path / "hf")
    assert imported.shape.architecture == architecture
    assert imported.shape.config == model.config
    back = imported.masked_lm().eval()
    ids = torch.randint(5, vocab, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model.head(model.encoder(ids))
        torch.testing.assert_close(back.head(back.encoder(ids)), expected, atol=1e-5, rtol=0)


def test_a_trained_distilbert_sinusoid_survives_the_export(tmp_path: Path) -> None:
    """`sinusoidal_pos_embds` stays in config.json; `transformers` loads the table as written."""
    from transformers import AutoModelForMaskedLM

    folder = tiny_checkpoint("distilbert", tmp_path / "hf", sinusoidal_pos_embds=True)
    imported = read_checkpoint(folder)
    model = imported.masked_lm()
    with torch.no_grad():
        model.encoder.embeddings.position.weight.add_(1.0)  # a training step's worth, and more
    tensors, config = export_like(model, imported.shape)
    write_weights(tensors, config, tmp_path / "out")
    assert config["sinusoidal_pos_embds"] is True
    theirs = AutoModelForMaskedLM.from_pretrained(tmp_path / "out")
    table = theirs.distilbert.embeddings.position_embeddings.weight
    assert torch.equal(table, model.encoder.embeddings.position.weight)


def test_reading_a_checkpoint_imports_neither_transformers_nor_flows(tmp_path: Path) -> None:
    folder = tiny_checkpoint("roberta", tmp_path / "hf")
    script = (
        "import sys\n"
        "from lightning_modules.transformers_import import read_checkpoint, export_like\n"
        f"imported = read_checkpoint({str(folder)!r})\n"
        "export_like(imported.masked_lm(), imported.shape)\n"
        "loaded = {name.split('.')[0] for name in sys.modules}\n"
        "print(sorted(loaded & {'transformers', 'flows'}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.strip() == "[]"
