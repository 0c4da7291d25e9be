"""A ModernBERT-shaped model exports as `transformers`' ModernBertForMaskedLM, same logits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer

from lightning_modules.export import can_export, export_huggingface
from lightning_modules.models.config import EncoderConfig
from tests.fakes import MODERNBERT_OPTIONS, SPECIALS, perturbed, tiny_tokenizer

MODERN: dict[str, Any] = {
    "hidden_size": 32,
    "num_layers": 4,  # global, local, local, global
    "num_heads": 4,
    "intermediate_size": 48,
    "max_position_embeddings": 2048,
    "layer_norm_eps": 1e-5,
    **MODERNBERT_OPTIONS,
    "local_attention": 128,
}


@pytest.fixture(scope="module", params=[{}, {"linear_bias": True, "norm_bias": True}])
def exported(request: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    directory = tmp_path_factory.mktemp("modernbert")
    tokenizer_file = tiny_tokenizer(directory / "tokenizer.json")
    vocab = Tokenizer.from_file(str(tokenizer_file)).get_vocab_size()
    model = perturbed(EncoderConfig(vocab_size=vocab, **{**MODERN, **request.param}))
    export_huggingface(model, tokenizer_file, SPECIALS, "wordpiece", True, directory / "hf")
    return model, directory / "hf"


def test_round_trip_at_1024_tokens_with_local_and_global_layers_and_padding(exported) -> None:
    from transformers import AutoModelForMaskedLM

    model, directory = exported
    theirs = AutoModelForMaskedLM.from_pretrained(directory, attn_implementation="sdpa").eval()
    assert type(theirs).__name__ == "ModernBertForMaskedLM"
    global_, local = "full_attention", "sliding_attention"
    assert theirs.config.layer_types == [global_, local, local, global_]
    input_ids = torch.randint(5, model.config.vocab_size, (2, 1024))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 700:] = 0  # a padded tail longer than the window: padding included
    with torch.no_grad():
        ours = model.head(model.encoder(input_ids, attention_mask))
        reference = theirs(input_ids=input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(ours, reference, atol=1e-4, rtol=0)


def test_fill_mask_pipeline_runs_on_the_modernbert_export(exported) -> None:
    from transformers import pipeline

    _, directory = exported
    predictions = pipeline("fill-mask", model=str(directory), top_k=3)("the cat sat on the [MASK]")
    assert len(predictions) == 3
    assert all("[MASK]" not in prediction["sequence"] for prediction in predictions)


def test_a_configuration_modernbert_cannot_represent_is_refused_naming_what_it_lacks(
    tmp_path: Path,
) -> None:
    config = EncoderConfig(
        vocab_size=60, **{**MODERN, "type_vocab_size": 2, "first_attention_norm": True}
    )
    model = perturbed(config)
    assert not can_export(model)
    with pytest.raises(
        ValueError,
        match=r"ModernBertForMaskedLM cannot represent this model; it lacks a norm before "
        r"layer 0's attention \(model\.first_attention_norm=true\); token-type embeddings "
        r"\(model\.type_vocab_size=2\)",
    ):
        export_huggingface(model, tmp_path / "t", SPECIALS, "wordpiece", True, tmp_path / "hf")


def test_bert_shaped_models_still_export_as_bert(tmp_path: Path) -> None:
    bert = perturbed(EncoderConfig(vocab_size=60, hidden_size=32, num_heads=4))
    assert can_export(bert)
    export_huggingface(bert, tiny_tokenizer(tmp_path / "t"), SPECIALS, "wordpiece", True, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == [
        "BertForMaskedLM"
    ]
