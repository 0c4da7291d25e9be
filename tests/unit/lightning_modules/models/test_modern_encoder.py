"""ModernBERT-class options of the encoder: what each one computes, specified by its behaviour."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lightning_modules.models.attention_masks import document_ids_from_separators
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.models.rotary import RotaryEmbedding, apply_rotary
from tests.fakes import MODERNBERT_OPTIONS

SEP = 3
MODERN: dict[str, Any] = {
    **MODERNBERT_OPTIONS,
    "local_attention": 8,
    "dropout": 0.0,
    "attention_dropout": 0.0,
}


def encoder(**options: Any) -> BertEncoder:
    torch.manual_seed(0)
    shape = {"vocab_size": 60, "hidden_size": 32, "num_layers": 4, "num_heads": 4}
    return BertEncoder(EncoderConfig(**{**shape, "intermediate_size": 48, **options})).eval()


def test_rotary_scores_depend_only_on_relative_position() -> None:
    rotary = RotaryEmbedding(head_dim=16, theta=10_000.0)
    query, key = torch.randn(1, 2, 10, 16), torch.randn(1, 2, 10, 16)
    positions = torch.arange(10)
    scores = apply_rotary(query, rotary(positions)) @ apply_rotary(key, rotary(positions)).mT
    for shift in (1, 37, 1000):
        tables = rotary(positions + shift)
        shifted = apply_rotary(query, tables) @ apply_rotary(key, tables).mT
        torch.testing.assert_close(shifted, scores, atol=1e-4, rtol=1e-4)
    # ...and they do depend on it: without rotation the scores are the plain dot products.
    assert not torch.allclose(scores, query @ key.mT, atol=1e-2)


@pytest.mark.parametrize("seq_len", [16, 37])
def test_a_sliding_window_layer_equals_dense_attention_under_the_banded_mask(seq_len: int) -> None:
    # The encoder's local layers run the blocked kernel (models/local_attention.py); a dense
    # banded mask through SDPA is the specification, equal up to fp32 summation order.
    model = encoder(global_attention_every=2, local_attention=4, num_layers=2)
    ids = torch.randint(5, 60, (2, seq_len))
    band = torch.tensor([[abs(q - k) <= 2 for k in range(seq_len)] for q in range(seq_len)])
    with torch.no_grad():
        hidden = model.embeddings(ids, None)
        hidden = model.layers[0](hidden, None)  # layer 0: global, no mask
        expected = model.final_norm(model.layers[1](hidden, band))
        torch.testing.assert_close(model(ids), expected, atol=2e-6, rtol=1e-5)


def test_a_window_covering_the_sequence_is_global_attention() -> None:
    ids = torch.randint(5, 60, (2, 16))
    with torch.no_grad():
        local = encoder(global_attention_every=2, local_attention=32)(ids)
        dense = encoder(global_attention_every=1)(ids)
        narrow = encoder(global_attention_every=2, local_attention=4)(ids)
    torch.testing.assert_close(local, dense)
    assert not torch.allclose(narrow, dense, atol=1e-3)


def test_document_ids_count_the_separators_before_each_token() -> None:
    ids = torch.tensor([[2, 7, 8, SEP, 9, SEP, 10, 11]])
    assert document_ids_from_separators(ids, SEP).tolist() == [[0, 0, 0, 0, 1, 1, 2, 2]]


@pytest.mark.parametrize(
    "options", [{}, MODERN, {**MODERN, "local_attention": 4}], ids=["bert", "modern", "narrow"]
)
def test_changing_document_b_leaves_document_a_bit_for_bit(options: dict[str, Any]) -> None:
    model = encoder(**options, document_attention=True)
    ids = torch.randint(5, 60, (1, 24))
    ids[0, 0], ids[0, 9], ids[0, 23] = 2, SEP, SEP  # document A: 0-9, document B: 10-23
    changed = ids.clone()
    changed[0, 10:23] = torch.randint(5, 60, (13,))
    with torch.no_grad():
        before = model(ids, document_ids=document_ids_from_separators(ids, SEP))
        after = model(changed, document_ids=document_ids_from_separators(changed, SEP))
        crossing = model(changed)
    assert torch.equal(after[0, :10], before[0, :10])
    assert not torch.equal(after[0, 10:], before[0, 10:])
    assert not torch.allclose(crossing[0, :10], before[0, :10])  # without it, B leaks into A


SINGLE_OPTIONS = [
    {"position_embedding": "rotary"},
    {"feed_forward": "geglu"},
    {"linear_bias": False},
    {"norm_bias": False},
    {"norm_placement": "pre", "first_attention_norm": False},
    {"type_vocab_size": 0},
    {"global_attention_every": 2, "local_attention": 4},
]


@pytest.mark.parametrize("options", SINGLE_OPTIONS, ids=lambda options: next(iter(options)))
def test_each_option_works_on_its_own(options: dict[str, Any]) -> None:
    model = BertForMaskedLM(EncoderConfig(vocab_size=60, hidden_size=32, num_heads=4, **options))
    ids = torch.randint(5, 60, (2, 12))
    output = model(ids, ids)
    output.loss.backward()
    assert torch.isfinite(output.loss)
    assert all(parameter.grad is not None for parameter in model.parameters())


def test_bias_free_layers_have_no_biases_and_geglu_gates_a_double_width_projection() -> None:
    model = encoder(**MODERN)
    names = [name for name, _ in model.named_parameters()]
    assert not [name for name in names if name.endswith(".bias")]
    layer = model.layers[1]
    assert layer.feed_forward.up.weight.shape == (2 * 48, 32)
    assert isinstance(model.layers[0].attention_norm, torch.nn.Identity)
    assert isinstance(layer.attention_norm, torch.nn.LayerNorm)
    assert "embeddings.position.weight" not in names
    assert not [name for name in names if "token_type" in name]


def test_rotary_models_run_past_512_tokens() -> None:
    model = encoder(**MODERN, max_position_embeddings=2048)
    with torch.no_grad():
        assert model(torch.randint(5, 60, (1, 1500))).shape == (1, 1500, 32)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"position_embedding": "alibi"}, r"model\.position_embedding='alibi' must be one of"),
        ({"feed_forward": "swiglu"}, r"model\.feed_forward='swiglu' must be one of"),
        ({"first_attention_norm": False}, r"model\.first_attention_norm=false needs model\.norm"),
        ({"global_attention_every": 0}, r"model\.global_attention_every=0 must be a positive"),
        ({"type_vocab_size": -1}, r"model\.type_vocab_size=-1 must be a non-negative integer"),
    ],
)
def test_bad_options_name_their_key(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EncoderConfig(vocab_size=60, hidden_size=32, num_heads=4, **options)


def test_a_compiled_modern_model_computes_and_trains_as_in_eager_mode() -> None:
    # trainer.compile: dynamo and AOT autograd trace the gated feed-forward's autograd function
    # and autograd's path of the local layers (aot_eager: the tracing without code generation).
    torch.manual_seed(0)
    config = EncoderConfig(
        **{**MODERN, "vocab_size": 60, "hidden_size": 32, "num_layers": 3, "num_heads": 4},
        intermediate_size=48,
    )
    model = BertForMaskedLM(config)
    ids = torch.randint(5, 60, (2, 40))
    labels = torch.where(torch.rand(2, 40) < 0.3, ids, -100)
    eager = model(ids, labels).loss
    expected = torch.autograd.grad(eager, list(model.parameters()))
    model.encoder.compile(backend="aot_eager")
    compiled = model(ids, labels).loss
    assert torch.equal(compiled, eager)
    for ours, theirs in zip(
        torch.autograd.grad(compiled, list(model.parameters())), expected, strict=True
    ):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
