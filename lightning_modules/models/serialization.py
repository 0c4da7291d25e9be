"""Weights on disk as safetensors: no pickle, so loading a shared artifact cannot run code."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from lightning_modules.models.encoder import BertEncoder, EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "model_config.json"
TIED_DECODER = "head.word_embeddings.weight"


def save_masked_lm(model: BertForMaskedLM, directory: Path) -> None:
    """Writes weights (the tied decoder once, as the input embeddings) and the encoder config."""
    state = {
        name: tensor.detach().contiguous()
        for name, tensor in model.state_dict().items()
        if name != TIED_DECODER
    }
    save_file(state, str(directory / WEIGHTS_FILE))
    (directory / CONFIG_FILE).write_text(json.dumps(model.config.to_dict(), indent=2))


def load_encoder_config(directory: Path) -> EncoderConfig:
    return EncoderConfig(**json.loads((directory / CONFIG_FILE).read_text()))


def load_masked_lm(directory: Path) -> BertForMaskedLM:
    model = BertForMaskedLM(load_encoder_config(directory))
    missing, unexpected = model.load_state_dict(
        load_file(str(directory / WEIGHTS_FILE)), strict=False
    )
    if set(missing) != {TIED_DECODER} or unexpected:
        raise ValueError(
            f"{directory / WEIGHTS_FILE} does not match its config: "
            f"missing {missing}, unexpected {unexpected}"
        )
    return model


def load_encoder_weights(encoder: BertEncoder, directory: Path) -> None:
    """Copies pretrained encoder weights in place; the config must match exactly."""
    expected = load_encoder_config(directory)
    if expected != encoder.config:
        raise ValueError(
            f"pretrained encoder in {directory} was built with {expected}, not {encoder.config}"
        )
    state = load_file(str(directory / WEIGHTS_FILE))
    prefix = "encoder."
    encoder.load_state_dict(
        {name[len(prefix) :]: tensor for name, tensor in state.items() if name.startswith(prefix)},
        strict=True,
    )


def count_parameters(module: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in module.parameters())
