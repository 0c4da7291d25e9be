"""Distillation's torch parts: taps read the encoder faithfully, the init copies the mapped layers,
and the losses train a student toward a frozen teacher."""

from __future__ import annotations

import pytest
import torch

from lightning_modules.distill_losses import DistillLosses
from lightning_modules.distill_module import DistillationModule
from lightning_modules.models.config import IGNORE_INDEX, EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.models.student_init import (
    copy_mismatches,
    init_from_teacher,
    uniform_layer_map,
)
from lightning_modules.models.taps import tapped
from lightning_modules.optim_settings import OptimizerSettings

VOCAB = 50


def model(layers: int, width: int = 32, heads: int = 2, **extra: object) -> BertForMaskedLM:
    config = EncoderConfig(
        VOCAB,
        hidden_size=width,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=2 * width,
        dropout=0.0,
        attention_dropout=0.0,
        **extra,  # type: ignore[arg-type]
    )
    return BertForMaskedLM(config)


def batch(seed: int = 0, size: int = 8, length: int = 16) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (size, length), generator=generator)
    labels = torch.full_like(ids, IGNORE_INDEX)
    chosen = torch.rand(ids.shape, generator=generator) < 0.3
    labels[chosen] = ids[chosen]
    masked = ids.clone()
    masked[chosen] = 4
    return {"input_ids": masked, "labels": labels, "attention_mask": torch.ones_like(ids)}


@pytest.mark.parametrize(
    ("norm", "positions"), [("post", "absolute"), ("pre", "absolute"), ("pre", "rotary")]
)
def test_taps_see_every_layer_and_the_attention_the_fused_kernel_applied(
    norm: str, positions: str
) -> None:
    torch.manual_seed(0)
    network = model(3, norm_placement=norm, position_embedding=positions)
    ids = batch()["input_ids"]
    mask = torch.ones_like(ids)
    mask[:, -4:] = 0  # padding: the recomputed attention must honour the mask
    with tapped(network.encoder, attention=True) as taps:
        output = network.encoder(ids, mask)
    assert len(taps.hidden) == 4  # embeddings + 3 layers
    assert torch.equal(taps.hidden[-1], output)
    called = taps.attention_inputs[1]
    block, hidden = called.block, called.hidden
    assert (called.rotary is not None) == (positions == "rotary")
    probabilities = taps.attention(1)
    assert torch.allclose(probabilities.sum(-1), torch.ones(()))
    assert float(probabilities[..., -4:].max().detach()) == 0.0
    b, s, _ = hidden.shape
    value = block.qkv(hidden).view(b, s, 3, block.num_heads, block.head_dim)[:, :, 2]
    context = (probabilities @ value.transpose(1, 2)).transpose(1, 2).reshape(b, s, -1)
    assert torch.allclose(block.out(context), block(hidden, called.mask, called.rotary), atol=1e-5)


def test_a_student_of_the_teachers_shape_starts_from_every_other_layer() -> None:
    torch.manual_seed(0)
    teacher, student = model(4), model(2)
    layer_map = uniform_layer_map(2, 4)
    assert layer_map == (1, 3)
    assert uniform_layer_map(6, 12) == (1, 3, 5, 7, 9, 11)
    assert copy_mismatches(student.config, teacher.config) == []
    init_from_teacher(student, teacher, layer_map)
    for index, source in enumerate(layer_map):
        for (name, tensor), (_, copied) in zip(
            teacher.encoder.layers[source].state_dict().items(),
            student.encoder.layers[index].state_dict().items(),
            strict=True,
        ):
            assert torch.equal(tensor, copied), name
    assert torch.equal(student.head.bias, teacher.head.bias)
    assert student.head.word_embeddings is student.encoder.embeddings.word  # still tied
    narrow = model(2, width=16)
    assert copy_mismatches(narrow.config, teacher.config) == [
        "hidden_size=16 (teacher: 32)",
        "intermediate_size=32 (teacher: 64)",
    ]


def test_distillation_trains_a_narrower_student_toward_a_frozen_teacher() -> None:
    torch.manual_seed(0)
    teacher, student = model(4, width=32, heads=2), model(2, width=16, heads=2)
    with torch.no_grad():  # an opinionated teacher: a random init predicts almost uniformly
        teacher.head.bias.copy_(3.0 * torch.randn(VOCAB))
    teacher_state = {name: t.clone() for name, t in teacher.state_dict().items()}
    losses = DistillLosses(
        kl_weight=1.0,
        mlm_weight=1.0,
        cosine_weight=1.0,
        hidden_mse_weight=1.0,
        attention_mse_weight=1.0,
    )
    module = DistillationModule(
        student,
        teacher,
        losses,
        (1, 3),
        OptimizerSettings(learning_rate=3e-3, total_steps=40, warmup_steps=0),
    )
    optimizer = module.configure_optimizers()["optimizer"]
    data = batch(1)
    module.train()
    assert not module.teacher.training

    def step() -> dict[str, torch.Tensor]:
        return module.terms(module.forward_student(data), module.forward_teacher(data), data)

    first = step()
    assert set(first) == {"kl", "mlm", "cosine", "hidden_mse", "attention_mse"}
    for _ in range(40):
        optimizer.zero_grad()
        module.weighted(step()).backward()
        optimizer.step()
    last = step()
    for name in ("kl", "cosine", "hidden_mse"):
        assert float(last[name].detach()) < 0.8 * float(first[name].detach()), name
    for name, tensor in teacher.state_dict().items():
        assert torch.equal(tensor, teacher_state[name]), name
    assert all(parameter.grad is None for parameter in teacher.parameters())
