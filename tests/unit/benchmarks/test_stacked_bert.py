"""The hand-stacked ensemble forward that issue 36's ceiling benchmark times is the members' own
function: each member's logits from the stacked weights are its model's logits."""

from __future__ import annotations

import pytest
import torch
from torch.func import stack_module_state

from benchmarks.stacked_bert import stacked_logits, supported
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.heads import BertForSequenceClassification

SHAPE = {
    "vocab_size": 50,
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 16,
    "dropout": 0.0,
    "attention_dropout": 0.0,
}


def members(config: EncoderConfig, count: int) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    models = [BertForSequenceClassification(config, 3, 0.0).eval() for _ in range(count)]
    for model in models:  # non-trivial norms and biases, so a misplaced tensor shows
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if parameter.ndim == 1:
                    parameter.normal_(1.0 if "norm.weight" in name else 0.0, 0.1)
    return models


def test_each_member_gets_its_own_models_logits() -> None:
    config = EncoderConfig(**SHAPE)  # type: ignore[arg-type]
    models = members(config, 3)
    input_ids = torch.randint(1, 50, (4, 10))
    attention_mask = torch.ones(4, 10, dtype=torch.bool)
    attention_mask[1:, 7:] = False  # padding in some rows
    token_type_ids = (torch.arange(10) >= 5).long().expand(4, 10)
    weights, _ = stack_module_state(models)  # type: ignore[arg-type]
    with torch.no_grad():
        together = stacked_logits(weights, config, input_ids, attention_mask, token_type_ids)
        for member, model in enumerate(models):
            alone = model(input_ids, attention_mask, token_type_ids)
            torch.testing.assert_close(together[member], alone, atol=1e-5, rtol=1e-5)


def test_a_shape_it_does_not_write_out_is_refused() -> None:
    config = EncoderConfig(**{**SHAPE, "norm_placement": "pre"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="post-LN BERT with \\[CLS\\] pooling only"):
        supported(config, members(config, 1)[0])
