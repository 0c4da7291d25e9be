from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lightning_modules.models.config import IGNORE_INDEX, EncoderConfig
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.models.heads import BertForMaskedLM, BertForSequenceClassification
from lightning_modules.optim import build_optimizer
from lightning_modules.optim_settings import OptimizerSettings

TINY = {
    "vocab_size": 97,
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "dropout": 0.0,
    "attention_dropout": 0.0,
}


def test_head_count_must_divide_hidden_size_and_the_error_says_which_keys() -> None:
    with pytest.raises(
        ValueError,
        match=r"model.hidden_size=100 is not divisible by "
        r"model.num_heads=3",
    ):
        EncoderConfig(vocab_size=10, hidden_size=100, num_heads=3)


def test_masked_only_loss_equals_dense_cross_entropy_on_selected_positions() -> None:
    torch.manual_seed(0)
    model = BertForMaskedLM(EncoderConfig(**TINY)).eval()
    input_ids = torch.randint(5, 97, (3, 16))
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[0, 2], labels[1, 5], labels[2, 15] = 7, 8, 9
    output = model(input_ids, labels)
    hidden = model.encoder(input_ids)
    dense_logits = model.head(hidden)
    expected = F.cross_entropy(
        dense_logits.view(-1, 97), labels.view(-1), ignore_index=IGNORE_INDEX
    )
    assert torch.allclose(output.loss, expected, atol=1e-6)
    assert output.logits.shape == (3, 97)
    assert output.targets.tolist() == [7, 8, 9]


def test_decoder_is_tied_to_the_input_embeddings() -> None:
    model = BertForMaskedLM(EncoderConfig(**TINY))
    assert model.head.word_embeddings.weight is model.encoder.embeddings.word.weight


def test_padding_does_not_change_the_outputs_of_real_tokens() -> None:
    torch.manual_seed(0)
    encoder = BertEncoder(EncoderConfig(**TINY)).eval()
    ids = torch.randint(5, 97, (1, 10))
    padded = torch.cat([ids, torch.zeros(1, 6, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 10), torch.zeros(1, 6)], dim=1)
    assert torch.allclose(encoder(ids), encoder(padded, mask)[:, :10], atol=1e-5)


@pytest.mark.parametrize("norm_placement", ["post", "pre"])
def test_a_few_steps_lower_the_loss_on_a_fixed_batch(norm_placement: str) -> None:
    torch.manual_seed(0)
    model = BertForMaskedLM(EncoderConfig(**TINY, norm_placement=norm_placement))
    optimizer, _ = build_optimizer(
        model, OptimizerSettings(learning_rate=3e-3, total_steps=30, warmup_steps=0)
    )
    input_ids = torch.randint(5, 97, (8, 16))
    labels = torch.where(torch.rand(8, 16) < 0.3, input_ids, torch.full_like(input_ids, -100))
    losses = []
    for _ in range(30):
        loss = model(input_ids, labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_no_weight_decay_on_biases_and_layer_norms() -> None:
    model = BertForMaskedLM(EncoderConfig(**TINY))
    optimizer, _ = build_optimizer(
        model, OptimizerSettings(learning_rate=1e-3, weight_decay=0.1, warmup_steps=0)
    )
    decayed = {id(p) for p in optimizer.param_groups[0]["params"]}
    for name, parameter in model.named_parameters():
        is_norm_or_bias = parameter.ndim < 2 or "norm" in name
        assert (id(parameter) in decayed) != is_norm_or_bias, name


def test_mean_pooling_reads_every_real_token_and_no_padding() -> None:
    torch.manual_seed(0)
    model = BertForSequenceClassification(EncoderConfig(**TINY), 2, 0.0, "mean").eval()
    ids = torch.randint(5, 97, (1, 10))
    padded = torch.cat([ids, torch.zeros(1, 6, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 10), torch.zeros(1, 6)], dim=1)
    assert torch.allclose(model(ids, torch.ones(1, 10)), model(padded, mask), atol=1e-5)
    last_changed = ids.clone()
    last_changed[0, -1] = 4
    assert not torch.allclose(model(ids, torch.ones(1, 10)), model(last_changed, torch.ones(1, 10)))


def test_cls_pooling_classifies_from_the_first_position_as_bert_does() -> None:
    torch.manual_seed(0)
    model = BertForSequenceClassification(EncoderConfig(**TINY), 2, 0.0, "cls").eval()
    ids = torch.randint(5, 97, (1, 10))
    hidden = model.encoder(ids)
    expected = model.classifier(torch.tanh(model.pooler(hidden[:, 0])))
    assert torch.allclose(model(ids, torch.ones(1, 10)), expected, atol=1e-6)
