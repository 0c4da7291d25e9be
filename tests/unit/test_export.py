"""An exported model loads in `transformers` and computes the same logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from lightning_modules.export import export_huggingface
from lightning_modules.models.encoder import EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM
from tests.fakes import SPECIALS, logits_match, tiny_tokenizer


@pytest.fixture
def exported(tmp_path: Path) -> tuple[BertForMaskedLM, Path]:
    torch.manual_seed(0)
    tokenizer_file = tiny_tokenizer(tmp_path / "tokenizer.json")
    vocab = Tokenizer.from_file(str(tokenizer_file)).get_vocab_size()
    model = BertForMaskedLM(
        EncoderConfig(
            vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64
        )
    )
    with torch.no_grad():  # non-trivial biases and norms, so a misplaced tensor shows
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    export_huggingface(model, tokenizer_file, SPECIALS, "wordpiece", True, tmp_path / "hf")
    return model.eval(), tmp_path / "hf"


def test_transformers_loads_the_export_with_equal_logits(exported) -> None:
    from transformers import AutoModelForMaskedLM

    model, directory = exported
    theirs = AutoModelForMaskedLM.from_pretrained(directory).eval()
    assert logits_match(
        lambda ids, mask: model.head(model.encoder(ids, mask)), theirs, model.config.vocab_size
    )


def test_fill_mask_pipeline_runs_on_the_export(exported) -> None:
    from transformers import pipeline

    _, directory = exported
    predictions = pipeline("fill-mask", model=str(directory), top_k=3)("the cat sat on the [MASK]")
    assert len(predictions) == 3
    assert all("[MASK]" not in prediction["sequence"] for prediction in predictions)


def test_pre_layer_norm_models_cannot_be_exported_as_bert(tmp_path: Path) -> None:
    model = BertForMaskedLM(
        EncoderConfig(vocab_size=50, hidden_size=32, num_heads=4, norm_placement="pre")
    )
    with pytest.raises(ValueError, match="norm_placement=pre has no BertForMaskedLM equivalent"):
        export_huggingface(model, tmp_path / "x", SPECIALS, "wordpiece", True, tmp_path / "hf")
