"""Where pretraining starts when it does not start from random init: given weights.

`pretrain.init_from` names a pretrain artifact of this store (continued pretraining, a domain
refresh) or, once the pipeline has imported it, a `transformers` checkpoint (flows/stages/
checkpoint.py). Either way the weights are identified by content in the stage key, the vocabulary
must be the one they were trained with, and the shape is theirs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from flows.core.artifacts import MANIFEST_FILE, ArtifactRef, read_manifest
from flows.core.settings import ConfigError
from flows.stages.public_import import load_discriminator_head, read_lineage
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


@dataclass(frozen=True)
class InitSource:
    """Weights to continue from, and what identifies them in the stage key."""

    path: Path
    identity: str


def init_source(init_from: str | None) -> InitSource | None:
    """A pretrain (or imported checkpoint) artifact's weights; keyed by its content address (or
    the weights' hash)."""
    if init_from is None:
        return None
    path = Path(init_from).expanduser().resolve()
    if not (path / CONFIG_FILE).is_file() or not (path / WEIGHTS_FILE).is_file():
        raise ConfigError(
            f"pretrain.init_from={init_from!r} is not a pretrain artifact directory (it needs "
            f"{CONFIG_FILE} and {WEIGHTS_FILE}); give <artifact root>/pretrain/<key>, a "
            "transformers checkpoint folder or a models:/<name>@<alias> URI"
        )
    manifest = path / MANIFEST_FILE
    if manifest.is_file():
        recorded = read_manifest(manifest)
        return InitSource(path, f"{recorded['stage']}:{recorded['key']}")
    digest = hashlib.sha256((path / WEIGHTS_FILE).read_bytes()).hexdigest()[:20]
    return InitSource(path, f"weights:{digest}")


def check_same_tokenizer(init: InitSource, tokenizer_ref: ArtifactRef) -> None:
    """Refuses a retrained tokenizer: same size, other ids would load silently as wrong rows."""
    manifest = init.path / MANIFEST_FILE
    if not manifest.is_file():
        return  # weights from outside the store carry no tokenizer identity to compare
    trained_with = read_manifest(manifest).get("inputs", {}).get("tokenizer")
    if trained_with != tokenizer_ref.key:
        raise ConfigError(
            f"pretrain.init_from={init.path} was trained with tokenizer {trained_with}, this run's "
            f"tokenizer is {tokenizer_ref.key}: continued pretraining must keep the vocabulary; "
            f"add tokenizer.from_artifact={init.path}"
        )


def run_encoder_config(
    model: ModelSettings, trained: TrainedTokenizer, init: InitSource | None
) -> EncoderConfig:
    """`model.*` for this run's vocabulary, fitted to the weights it continues (if any)."""
    config = encoder_config(model, trained.vocab_size, trained.special.pad)
    return config if init is None else fitted_config(config, init)


def fitted_config(config: EncoderConfig, init: InitSource) -> EncoderConfig:
    """`config` as continuing `init` makes it: the init's shape (an imported checkpoint's table
    may hold spare rows past its tokenizer's ids), with this run's rates that shape no weight.
    A `model.*` that does not fit the init is a ConfigError naming the keys."""
    source = load_encoder_config(init.path)
    if read_lineage(init.path) is not None and config.vocab_size <= source.vocab_size:
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
            f"pretrain.init_from={init.path} does not fit this run's model: {differing}; "
            "continue with the tokenizer it was trained with (same vocabulary) and the same "
            "model.* settings"
        )
    return config


def load_initial_weights(model: BertForMaskedLM | ElectraForPreTraining, init: InitSource) -> None:
    """Fills `model` from `init`, whose shape it must have. ELECTRA can start from an imported
    checkpoint's encoder: its discriminator takes the encoder (and the checkpoint's
    discriminator head, when it had one); the generator starts fresh."""
    fitted_config(model.config, init)
    is_electra = (init.path / ELECTRA_CONFIG_FILE).is_file()
    if is_electra != isinstance(model, ElectraForPreTraining) and (
        is_electra or read_lineage(init.path) is None
    ):
        raise ConfigError(
            f"pretrain.init_from={init.path} holds a {'ELECTRA' if is_electra else 'masked LM'} "
            "model; continue it with the same objective family"
        )
    if not isinstance(model, ElectraForPreTraining) or is_electra:
        load_weights(model, init.path / WEIGHTS_FILE)
        return
    load_encoder_weights(model.discriminator, init.path)
    head = load_discriminator_head(init.path)
    if head is not None:
        model.discriminator_head.load_state_dict(head)
