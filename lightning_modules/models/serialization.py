"""Weights on disk as safetensors: no pickle, so loading a shared artifact cannot run code.

safetensors refuses tensors that share memory, and our models share on purpose (the tied
decoder; ELECTRA's generator using the discriminator's embeddings): each shared tensor is saved
once, under its first name, and loading restores the rest through the model's own sharing.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from lightning_modules.models.config import (
    CONFIG_FILE,
    ELECTRA_CONFIG_FILE,
    WEIGHTS_FILE,
    ElectraConfig,
    EncoderConfig,
    load_encoder_config,
)
from lightning_modules.models.electra import ElectraForPreTraining
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.models.heads import BertForMaskedLM


def aliased_names(model: nn.Module) -> set[str]:
    """State names whose tensor is the same object as one listed earlier (tied or shared)."""
    seen: set[int] = set()
    aliases = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            aliases.add(name)
        seen.add(id(tensor))
    return aliases


def save_weights(model: nn.Module, path: Path) -> None:
    aliases = aliased_names(model)
    state = {
        name: tensor.detach().contiguous()
        for name, tensor in model.state_dict().items()
        if name not in aliases
    }
    save_file(state, str(path))


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors in a safetensors file; a damaged file is a ValueError that names it."""
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{path} is not a readable safetensors file ({error})") from error


def load_weights(model: nn.Module, path: Path) -> None:
    """Fills `model` in place; every tensor not saved must be an alias of one that was."""
    missing, unexpected = model.load_state_dict(read_weights(path), strict=False)
    if set(missing) != aliased_names(model) or unexpected:
        raise ValueError(
            f"{path} does not match its config: missing {missing}, unexpected {unexpected}"
        )


def save_masked_lm(model: BertForMaskedLM, directory: Path) -> None:
    """Writes weights (the tied decoder once, as the input embeddings) and the encoder config."""
    save_weights(model, directory / WEIGHTS_FILE)
    (directory / CONFIG_FILE).write_text(json.dumps(model.config.to_dict(), indent=2))


def save_electra(model: ElectraForPreTraining, directory: Path) -> None:
    """Like `save_masked_lm`; `model_config.json` is the discriminator's, the encoder to reuse."""
    save_weights(model, directory / WEIGHTS_FILE)
    (directory / CONFIG_FILE).write_text(json.dumps(model.config.to_dict(), indent=2))
    (directory / ELECTRA_CONFIG_FILE).write_text(json.dumps(model.electra.to_dict(), indent=2))


def load_masked_lm(directory: Path) -> BertForMaskedLM:
    model = BertForMaskedLM(load_encoder_config(directory))
    load_weights(model, directory / WEIGHTS_FILE)
    return model


def load_electra(directory: Path) -> ElectraForPreTraining:
    electra = ElectraConfig(**json.loads((directory / ELECTRA_CONFIG_FILE).read_text()))
    model = ElectraForPreTraining(load_encoder_config(directory), electra)
    load_weights(model, directory / WEIGHTS_FILE)
    return model


def load_encoder_weights(encoder: BertEncoder, directory: Path) -> None:
    """Copies pretrained encoder weights in place; the config must match, dropout rates aside.

    The encoder is the masked LM's `encoder`, or an ELECTRA artifact's `discriminator`.
    """
    check_same_shape(encoder.config, directory)
    state = read_weights(directory / WEIGHTS_FILE)
    prefix = "discriminator." if (directory / ELECTRA_CONFIG_FILE).is_file() else "encoder."
    encoder.load_state_dict(
        {name[len(prefix) :]: tensor for name, tensor in state.items() if name.startswith(prefix)},
        strict=True,
    )


def load_masked_lm_weights(model: BertForMaskedLM, directory: Path) -> None:
    """Copies a pretrained masked LM in place, head included (a prompt reads the head); the
    config must match, dropout rates aside. An ELECTRA artifact has no MLM head to give."""
    if (directory / ELECTRA_CONFIG_FILE).is_file():
        raise ValueError(
            f"{directory} is an ELECTRA discriminator: it has no masked-LM head for a prompt to "
            "read; drop the task's `prompt` or pretrain with an MLM objective"
        )
    check_same_shape(model.config, directory)
    load_weights(model, directory / WEIGHTS_FILE)


def check_same_shape(config: EncoderConfig, directory: Path) -> None:
    """The pretrained config must equal `config` but for dropout rates: they shape no weight,
    and fine-tuning may set its own (`finetune.encoder_dropout`)."""
    expected = load_encoder_config(directory)
    same_rates = replace(
        expected, dropout=config.dropout, attention_dropout=config.attention_dropout
    )
    if same_rates != config:
        raise ValueError(
            f"pretrained encoder in {directory} was built with {expected}, not {config}"
        )


def count_parameters(module: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in module.parameters())
