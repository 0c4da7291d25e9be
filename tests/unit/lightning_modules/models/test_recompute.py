"""Pre-LN norms recomputed in backward: the same numbers, one tensor fewer kept per norm."""

from __future__ import annotations

import gc
import weakref

import torch
from torch import nn

from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.encoder import EncoderLayer
from lightning_modules.models.recompute import norms_recomputed
from tests.fakes import MODERNBERT_OPTIONS, gradient_pairs


def test_the_output_is_freed_when_the_context_closes_and_backward_recomputes_it() -> None:
    torch.manual_seed(0)
    norm, linear = nn.LayerNorm(8), nn.Linear(8, 4)
    hidden = torch.randn(5, 8, requires_grad=True)
    with norms_recomputed() as normed:
        output = normed(norm, hidden)
        kept = weakref.ref(output)
        result = linear(output)
        del output
    gc.collect()
    assert kept() is None  # only the norm's input stays, kept by the norm anyway
    ours = torch.autograd.grad(result.sum(), [hidden, linear.weight, norm.weight])
    expected = linear(norm(hidden))
    theirs = torch.autograd.grad(expected.sum(), [hidden, linear.weight, norm.weight])
    for mine, reference in zip(ours, theirs, strict=True):
        assert torch.equal(mine, reference)


def test_a_pre_ln_layer_computes_and_differentiates_bit_for_bit_as_without_recomputing() -> None:
    torch.manual_seed(0)
    shape = {"vocab_size": 60, "hidden_size": 32, "num_heads": 4, "intermediate_size": 48}
    options = {**MODERNBERT_OPTIONS, "dropout": 0.0, "attention_dropout": 0.0}
    layer = EncoderLayer(EncoderConfig(**shape, **options), index=1)
    hidden = torch.randn(2, 16, 32, requires_grad=True)
    ours = layer(hidden, None)
    middle = hidden + layer.attention(layer.attention_norm(hidden), None)
    theirs = middle + layer.feed_forward(layer.feed_forward_norm(middle))
    assert torch.equal(ours, theirs)
    for mine, reference in gradient_pairs(ours, theirs, [hidden, *layer.parameters()]):
        assert torch.equal(mine, reference)
