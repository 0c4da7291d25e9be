"""An exported model loads in `transformers` and computes the same logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from lightning_modules.export import can_export, export_huggingface
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM
from tests.fakes import SPECIALS, logits_match, perturbed, tiny_tokenizer


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


@pytest.mark.parametrize(
    "options",
    [
        {"activation": "gelu_tanh", "tie_word_embeddings": False},
        {"activation": "gelu_tanh", "embedding_size": 16, "share_layers": True},  # ALBERT
        {"tie_word_embeddings": False, "embedding_size": 16},  # ELECTRA's generator class
    ],
    ids=["bert", "albert", "electra-generator"],
)
def test_the_activation_and_an_untied_decoder_export_with_equal_logits(
    options: dict[str, object], tmp_path: Path
) -> None:
    """gelu_tanh is written as transformers' gelu_new; an untied decoder as the class's own
    decoder weight and bias (transformers ties neither when the config says untied)."""
    from transformers import AutoModelForMaskedLM

    config = EncoderConfig(
        vocab_size=60, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, **options
    )
    model = perturbed(config)
    with torch.no_grad():
        model.head.bias.normal_()  # an output bias far from zero, so a dropped one shows
    export_huggingface(model, tiny_tokenizer(tmp_path / "t"), SPECIALS, "wordpiece", True, tmp_path)
    theirs, loading = AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(loading.values())
    assert theirs.config.hidden_act == ("gelu_new" if "activation" in options else "gelu")
    assert theirs.config.tie_word_embeddings == config.tie_word_embeddings
    assert logits_match(
        lambda ids, mask: model.head(model.encoder(ids, mask)), theirs.eval(), config.vocab_size
    )


def test_a_tanh_gelu_generator_is_refused_its_class_head_applies_erf_gelu(tmp_path: Path) -> None:
    config = EncoderConfig(
        vocab_size=60, hidden_size=32, num_heads=4, embedding_size=16, activation="gelu_tanh"
    )
    model = perturbed(config)
    assert not can_export(model)
    with pytest.raises(ValueError, match=r"ElectraForMaskedLM's head applies erf gelu, not "):
        export_huggingface(model, tmp_path / "t", SPECIALS, "wordpiece", True, tmp_path / "hf")
