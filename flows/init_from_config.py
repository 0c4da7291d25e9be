"""`pretrain.init_from` naming a `transformers` checkpoint: where it is, and the config it implies.

Teams rarely pretrain from scratch: they continue a public checkpoint (BERT, RoBERTa, ModernBERT)
on their own text, as BioBERT continued BERT on PubMed. The checkpoint fixes the model's shape and
its vocabulary, so what only a from-scratch run uses (the default `model=` preset, the tokenizer's
training keys, what an `experiment=` bundle sets for them) gives way to it, with one note; a key
the user set explicitly (command line or run form: `overrides`) that contradicts it is refused,
naming the key and both values. Rates that shape no weight (dropout) stay the user's to set.

`init_from` may be a checkpoint folder, a Hugging Face Hub name (downloaded here, where a network
allows), a pretrain artifact of this store, or a `models:/` URI (resolved by the pipeline, which
holds the tracking connection, and adopted there the same way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from flows.continuation import continuation_recipe, explicit_trainer_keys
from flows.core.config import OVERRIDES_KEY
from flows.core.settings import ConfigError
from flows.stages.checkpoint_preflight import read_shape
from flows.stages.init_source import (
    HF_CONFIG_FILE,
    HUGGINGFACE_DIR,
    is_checkpoint_folder,
    is_registry_uri,
    locate,
    transformer_module,
)
from flows.training.settings import RUN_CHOICES
from lightning_modules.models.config import CONFIG_FILE

if TYPE_CHECKING:
    from lightning_modules.transformers_import import CheckpointShape


@dataclass(frozen=True)
class ExplicitKeys:
    """What the user's overrides set by name: `model.hidden_size=256` sets one key, `model=...`
    picks a group's preset (every key of it)."""

    values: dict[str, Any]
    groups: dict[str, str]

    @classmethod
    def of(cls, overrides: list[str]) -> ExplicitKeys:
        try:
            parsed = OverridesParser.create().parse_overrides(overrides)
        except HydraException as error:
            raise ConfigError(f"invalid override: {error}") from error
        values, groups = {}, {}
        for override in parsed:
            key = override.key_or_group
            if "." in key:
                values[key] = override.value()
            else:
                groups[key] = str(override.value())
        return cls(values, groups)


def model_conflicts(
    model: dict[str, Any], checkpoint: dict[str, Any], explicit: ExplicitKeys
) -> list[str]:
    """Each explicitly set `model.*` value the checkpoint contradicts, as `key=ours (ckpt: x)`."""
    preset = "model" in explicit.groups
    named = {key.removeprefix("model.") for key in explicit.values if key.startswith("model.")}
    return [
        f"model.{key}={model[key]!r} (the checkpoint's {value!r})"
        for key, value in checkpoint.items()
        if key in model and model[key] != value and (key in named or preset)
    ]


def tokenizer_conflicts(
    tokenizer: dict[str, Any], shape: CheckpointShape, explicit: ExplicitKeys
) -> list[str]:
    """The tokenizer keys a user set that cannot hold: a checkpoint brings its own vocabulary."""
    named = {
        key.removeprefix("tokenizer.") for key in explicit.values if key.startswith("tokenizer.")
    }
    conflicts = []
    if "from_artifact" in named and tokenizer.get("from_artifact") is not None:
        conflicts.append(
            f"tokenizer.from_artifact={tokenizer['from_artifact']} (the checkpoint brings its "
            "own tokenizer)"
        )
    vocab = shape.config.vocab_size
    if ("vocab_size" in named or "tokenizer" in explicit.groups) and tokenizer.get(
        "vocab_size"
    ) != vocab:
        conflicts.append(
            f"tokenizer.vocab_size={tokenizer.get('vocab_size')} (the checkpoint's {vocab})"
        )
    return conflicts


def shape_keys(shape: CheckpointShape) -> dict[str, Any]:
    """The checkpoint's `model.*` keys: every encoder option but what the tokenizer supplies."""
    keys = shape.config.to_dict()
    for supplied in ("vocab_size", "pad_token_id"):
        keys.pop(supplied)
    return keys


def checkpoint_name(folder: Path, shape: CheckpointShape) -> str:
    """What a run continuing `folder` calls its model: the folder's name (`bert-base-uncased`),
    or for Cloze's own export (`<store>/pretrain/<key>/huggingface`) the family and the key."""
    if folder.name == HUGGINGFACE_DIR:
        return f"{shape.model_type}-{folder.parent.name[:8]}"
    return folder.name


def adopt_checkpoint(config: dict[str, Any], folder: Path) -> tuple[dict[str, Any], list[str]]:
    """`config` with `model.*` (and the tokenizer's recorded size) taken from the checkpoint in
    `folder`, and a note saying so; a contradicting explicit key is a ConfigError."""
    shape = read_shape(folder)
    explicit = ExplicitKeys.of(list(config.get(OVERRIDES_KEY, [])))
    checkpoint = shape_keys(shape)
    model, tokenizer = dict(config["model"]), dict(config["tokenizer"])
    contested = {key: value for key, value in checkpoint.items() if key not in RUN_CHOICES}
    conflicts = model_conflicts(model, contested, explicit)
    conflicts += tokenizer_conflicts(tokenizer, shape, explicit)
    if conflicts:
        raise ConfigError(
            f"pretrain.init_from={folder} is a {shape.model_type} checkpoint whose shape and "
            f"vocabulary are fixed, but {'; '.join(conflicts)} was set explicitly: drop the "
            "override (or pick another checkpoint)"
        )
    named = {key.removeprefix("model.") for key in explicit.values if key.startswith("model.")}
    chosen = {key: model[key] for key in RUN_CHOICES if key in named and key in model}
    adopted = {"name": checkpoint_name(folder, shape), **checkpoint, **chosen}
    given_way = sorted(
        key for key, value in model.items() if key in checkpoint and checkpoint[key] != value
    )
    note = (
        f"pretrain.init_from: continuing the {shape.model_type} checkpoint {folder} "
        f"({shape.config.num_layers} layers x {shape.config.hidden_size}, vocabulary "
        f"{shape.config.vocab_size}): its shape and tokenizer are used"
        + (
            f"; from-scratch values set aside: {', '.join(f'model.{key}' for key in given_way)}"
            if given_way
            else ""
        )
    )
    continued, recipe = continuation_recipe(
        config,
        explicit_trainer_keys(explicit.values, explicit.groups),
        shape.has_mlm_head,
    )
    return {
        **continued,
        "model": adopted,
        "tokenizer": {**tokenizer, "vocab_size": shape.config.vocab_size},
        "pretrain": {**continued["pretrain"], "init_from": str(folder)},
    }, [f"{note}; {recipe}"]


def adopt_init(
    config: dict[str, Any], resolve: Callable[[str], Path] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """`config` adopting the checkpoint `pretrain.init_from` names, with the notes to print.

    Called once per run, by `resolve_run` (flows/resolve.py) where the run enters: a folder or a
    Hub name is adopted at once, before anything starts; a `models:/` URI once `resolve` (the
    pipeline's tracker) can look it up. A pretrain
    artifact of this store needs nothing: its run already fixed the shape.
    """
    check_teacher(config.get("distill") or {})
    init_from = config.get("pretrain", {}).get("init_from")
    if init_from is None or (is_registry_uri(init_from) and resolve is None):
        check_extension(config, init_from is not None)
        if init_from is None:
            check_head_warmup(config)
        return config, []
    folder = resolve(init_from) if resolve and is_registry_uri(init_from) else locate(init_from)
    if is_checkpoint_folder(folder):
        return adopt_checkpoint(config, folder)
    check_extension(config, False)
    if not (folder / CONFIG_FILE).is_file():
        raise ConfigError(
            f"pretrain.init_from={init_from!r} is neither a transformers checkpoint (no "
            f"{HF_CONFIG_FILE}) nor a pretrain artifact (no {CONFIG_FILE}): give the folder "
            "save_pretrained or huggingface-cli download wrote, <artifact root>/pretrain/<key>, "
            "or a models:/<name>@<alias> URI"
        )
    return {**config, "pretrain": {**config["pretrain"], "init_from": str(folder)}}, []


def checkpoint_folder(init_from: str | None) -> Path | None:
    """The `transformers` folder an adopted config continues, if it continues one."""
    if init_from is None or is_registry_uri(init_from):
        return None
    path = Path(init_from)
    return path if is_checkpoint_folder(path) else None


def check_extension(config: dict[str, Any], continues_checkpoint: bool) -> None:
    """`tokenizer.extend_vocabulary` grows a checkpoint's vocabulary; without one it would be
    silently ignored (a trained tokenizer is sized by `tokenizer.vocab_size`)."""
    extend = config.get("tokenizer", {}).get("extend_vocabulary")
    if extend and not continues_checkpoint:
        raise ConfigError(
            f"tokenizer.extend_vocabulary={extend} extends the vocabulary of a checkpoint, but "
            "pretrain.init_from names none: set pretrain.init_from=<transformers checkpoint "
            "folder>, or drop it (a tokenizer trained here has tokenizer.vocab_size tokens)"
        )


def check_head_warmup(config: dict[str, Any]) -> None:
    """`pretrain.head_warmup_steps` trains a checkpoint's MLM head alone first; without a
    checkpoint it would freeze a random encoder for those steps, which no recipe wants."""
    steps = config.get("pretrain", {}).get("head_warmup_steps")
    if steps:
        raise ConfigError(
            f"pretrain.head_warmup_steps={steps} trains a checkpoint's MLM head alone first, but "
            "pretrain.init_from names none: set pretrain.init_from=<transformers checkpoint "
            "folder>, or drop it (a model trained from scratch trains its head with the encoder)"
        )


def check_teacher(distill: dict[str, Any]) -> None:
    """`distill.teacher` naming a checkpoint folder: its files checked now, under its own key, as
    `pretrain.init_from`'s are (a Hub name or registry URI is checked once fetched)."""
    teacher = distill.get("teacher")
    if teacher is None or is_registry_uri(teacher) or not Path(teacher).expanduser().is_dir():
        return
    folder = transformer_module(Path(teacher).expanduser().resolve(), "distill.teacher")
    if is_checkpoint_folder(folder):
        read_shape(folder, "distill.teacher")
