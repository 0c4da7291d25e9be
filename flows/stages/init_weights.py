"""Pretraining from given weights instead of random init: the weights of the run's `InitPoint`
(flows/stages/init_point.py), a pretrain artifact of this store (continued pretraining, a domain
refresh) or a `transformers` checkpoint once imported (flows/stages/public_import.py). Either way
the weights are identified by content in the stage key, the vocabulary must be the one they were
trained with, and the shape is theirs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from flows.core.artifacts import MANIFEST_FILE, ArtifactRef, read_manifest
from flows.core.settings import ConfigError
from flows.stages.init_point import InitPoint
from flows.stages.public_import import load_discriminator_head
from flows.stages.tokenizer import TrainedTokenizer
from flows.training.settings import RUN_CHOICES, ModelSettings, encoder_config
from lightning_modules.models.config import (
    CONFIG_FILE,
    ELECTRA_CONFIG_FILE,
    WEIGHTS_FILE,
    EncoderConfig,
    load_encoder_config,
)
from lightning_modules.models.electra import ElectraForPreTraining
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.models.serialization import load_encoder_weights, load_weights


def check_same_tokenizer(init: InitPoint, tokenizer_ref: ArtifactRef) -> None:
    """Refuses a retrained tokenizer: same size, other ids would load silently as wrong rows."""
    weights = loaded(init)
    manifest = weights / MANIFEST_FILE
    if not manifest.is_file():
        return  # weights from outside the store carry no tokenizer identity to compare
    trained_with = read_manifest(manifest).get("inputs", {}).get("tokenizer")
    if trained_with != tokenizer_ref.key:
        raise ConfigError(
            f"pretrain.init_from={weights} was trained with tokenizer {trained_with}, this run's "
            f"tokenizer is {tokenizer_ref.key}: continued pretraining must keep the vocabulary; "
            f"add tokenizer.from_artifact={weights}"
        )


def loaded(init: InitPoint) -> Path:
    """The weights `init` starts from; a checkpoint not yet imported has none to load."""
    assert init.weights is not None, f"{init} holds no weights to load"
    return init.weights


def check_loadable(init: InitPoint) -> None:
    """The weights' files are there: a folder named as an artifact may hold only its config."""
    weights = loaded(init)
    if not (weights / CONFIG_FILE).is_file() or not (weights / WEIGHTS_FILE).is_file():
        raise ConfigError(
            f"pretrain.init_from={str(weights)!r} is not a pretrain artifact directory (it needs "
            f"{CONFIG_FILE} and {WEIGHTS_FILE}); give <artifact root>/pretrain/<key>, a "
            "transformers checkpoint folder or a models:/<name>@<alias> URI"
        )


def run_encoder_config(
    model: ModelSettings, trained: TrainedTokenizer, init: InitPoint | None
) -> EncoderConfig:
    """`model.*` for this run's vocabulary, fitted to the weights it continues (if any)."""
    config = encoder_config(model, trained.vocab_size, trained.special.pad)
    return config if init is None else fitted_config(config, init)


def fitted_config(config: EncoderConfig, init: InitPoint) -> EncoderConfig:
    """`config` as continuing `init` makes it: the init's shape (an imported checkpoint's table
    may hold spare rows past its tokenizer's ids), with this run's rates that shape no weight.
    A `model.*` that does not fit the init is a ConfigError naming the keys."""
    source = load_encoder_config(loaded(init))
    if init.lineage is not None and config.vocab_size <= source.vocab_size:
        config = replace(config, vocab_size=source.vocab_size)
    expected = replace(source, **{name: getattr(config, name) for name in RUN_CHOICES})
    if config != expected:
        ours, theirs = config.to_dict(), expected.to_dict()
        differing = ", ".join(
            f"{name}={theirs[name]} (this run: {ours[name]})"
            for name in sorted(ours)
            if ours[name] != theirs.get(name)
        )
        raise ConfigError(
            f"pretrain.init_from={init.weights} does not fit this run's model: {differing}; "
            "continue with the tokenizer it was trained with (same vocabulary) and the same "
            "model.* settings"
        )
    return config


def load_initial_weights(model: BertForMaskedLM | ElectraForPreTraining, init: InitPoint) -> None:
    """Fills `model` from `init`, whose shape it must have. ELECTRA can start from an imported
    checkpoint's encoder: its discriminator takes the encoder (and the checkpoint's
    discriminator head, when it had one); the generator starts fresh."""
    fitted_config(model.config, init)
    weights = loaded(init)
    is_electra = (weights / ELECTRA_CONFIG_FILE).is_file()
    if is_electra != isinstance(model, ElectraForPreTraining) and (
        is_electra or init.lineage is None
    ):
        raise ConfigError(
            f"pretrain.init_from={weights} holds a {'ELECTRA' if is_electra else 'masked LM'} "
            "model; continue it with the same objective family"
        )
    if not isinstance(model, ElectraForPreTraining) or is_electra:
        load_weights(model, weights / WEIGHTS_FILE)
        return
    load_encoder_weights(model.discriminator, weights)
    head = load_discriminator_head(weights)
    if head is not None:
        model.discriminator_head.load_state_dict(head)
