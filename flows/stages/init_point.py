"""Where pretraining starts: one owner for `pretrain.init_from`, resolved once per run.

`InitPoint` is the starting point as typed data: from scratch, a `transformers` checkpoint
(imported by the checkpoint stage), a pretrain artifact of this store (a continued run, a domain
refresh's champion), or a `models:/` URI, which only the pipeline's tracker resolves into one of
the two. `resolve_run` (flows/resolve.py) builds it once, through `adopt_init`; the pipeline and
the stages read it, and `lineage.json` is read once, when the weights are known.

Teams rarely pretrain from scratch: they continue a public checkpoint (BERT, RoBERTa, ModernBERT)
on their own text, as BioBERT continued BERT on PubMed. The checkpoint fixes the model's shape and
its vocabulary, so what only a from-scratch run uses (the default `model=` preset, the tokenizer's
training keys, what an `experiment=` bundle sets for them) gives way to it, with one note; a key
the user set explicitly (command line or run form: `overrides`) that contradicts it is refused,
naming the key and both values. Rates that shape no weight (dropout) stay the user's to set.

The trainer's defaults are a from-scratch recipe (a peak rate of 2e-3 after 300 warmup steps);
applied to a pretrained encoder they tear its features apart within tens of steps (measured on
all-MiniLM-L6-v2: token cosine to the base 0.52 after 40 steps at 1e-4 with a fresh head trained
jointly). So a run that continues a checkpoint takes a continuation recipe instead, from DAPT
(Gururangan et al. 2020) and BERT, chosen by measurement
(docs/results/2026-12-04-checkpoint-adaptation.md); a value the user set explicitly wins, and
the note says which values were adopted and which kept. A checkpoint without an MLM head (BertModel,
an ELECTRA discriminator, a sentence-transformers folder) gets a fresh head, which first trains
alone for `pretrain.head_warmup_steps` steps with the encoder frozen.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from flows.core.artifacts import MANIFEST_FILE, ArtifactRef, ArtifactStore, read_manifest
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
from lightning_modules.models.config import CONFIG_FILE, WEIGHTS_FILE

if TYPE_CHECKING:
    from lightning_modules.transformers_import import CheckpointShape

# Beside imported (and continued) weights: the checkpoint they descend from.
LINEAGE_FILE = "lineage.json"
# trainer.* of the continuation recipe: DAPT's and BERT's starting points (warmup 6%, beta2
# 0.98, linear decay) at a fifth of their peak rate. At 1e-4, 10 head-only then 30 whole-model
# steps left all-MiniLM-L6-v2's token outputs at a mean cosine of 0.748 to the base's (the slow
# test, tests/integration/test_real_checkpoint.py); the results page has the rest.
CONTINUATION: dict[str, Any] = {
    "learning_rate": 2e-5,
    "warmup_ratio": 0.06,
    "beta2": 0.98,
    "schedule": "linear",
}
# Steps of the head warm-up: where the head's validation loss stopped improving (measured).
HEAD_WARMUP_STEPS = 100

InitKind = Literal["scratch", "checkpoint", "artifact", "registry"]


@dataclass(frozen=True)
class InitPoint:
    """Where pretraining starts, resolved once; the default is from scratch."""

    kind: InitKind = "scratch"
    path: Path | None = None
    """The folder adopted: a `transformers` checkpoint, or a pretrain artifact's directory."""
    weights: Path | None = None
    """The Cloze weights pretraining loads: the artifact itself, or a checkpoint once imported."""
    identity: str | None = None
    """What names `weights` in the pretrain key: `<stage>:<key>`, or their hash outside a store."""
    lineage: dict[str, Any] | None = None
    """The checkpoint `weights` descend from (their lineage.json), if any."""
    registry_uri: str | None = None
    """The `models:/` URI it was given as; kind `registry` until the tracker resolves it."""

    @classmethod
    def of_artifact(cls, path: Path, registry_uri: str | None = None) -> InitPoint:
        """A pretrain (or imported checkpoint) artifact's weights, keyed by its content address
        (or, outside a store, by the weights' hash); whether they load is the stage's check."""
        path = path.expanduser().resolve()
        identity = weights_identity(path)
        return cls("artifact", path, path, identity, read_lineage(path), registry_uri)

    @classmethod
    def of_adopted(cls, init_from: str | None) -> InitPoint:
        """The point `pretrain.init_from` of an adopted config names (`adopt_init` resolved it
        to a folder): for a caller that holds the config alone."""
        if init_from is None:
            return SCRATCH
        if is_registry_uri(init_from):
            return cls("registry", registry_uri=init_from)
        path = Path(init_from)
        return cls("checkpoint", path) if is_checkpoint_folder(path) else cls.of_artifact(path)

    def imported(self, ref: ArtifactRef) -> InitPoint:
        """This checkpoint once the checkpoint stage imported it into Cloze's weights, `ref`."""
        assert self.kind == "checkpoint", self
        return replace(
            self,
            weights=ref.path,
            identity=weights_identity(ref.path),
            lineage=read_lineage(ref.path),
        )

    @property
    def checkpoint(self) -> Path | None:
        """The `transformers` folder the run imports (its tokenizer and weights), if any."""
        return self.path if self.kind == "checkpoint" else None

    def lineage_params(self) -> dict[str, str]:
        """The base checkpoint as MLflow params of a run that continued it; {} for none."""
        if self.lineage is None:
            return {}
        return {
            "base_checkpoint.model_type": self.lineage["model_type"],
            "base_checkpoint.architecture": self.lineage["architecture"],
            "base_checkpoint.name": self.lineage["name"],
            "base_checkpoint.weights_sha256": self.lineage["weights_sha256"],
        }

    def describe(self) -> str:
        """Where a model trained from here started, for its registry version's description."""
        if self.lineage is not None:
            return (
                f"continued from the {self.lineage['model_type']} checkpoint "
                f"{self.lineage['name']} ({self.lineage['architecture']}, weights sha256 "
                f"{self.lineage['weights_sha256'][:16]})"
            )
        return f"continued from {self.weights}" if self.weights else "random init"

    def published(self) -> ArtifactRef | None:
        """The published artifact the weights are (`<root>/<stage>/<key>`), if they are one:
        what `compare` counts the steps before a continued run from."""
        if self.weights is None or not (self.weights / MANIFEST_FILE).is_file():
            return None  # weights outside any store: no steps on record
        store = ArtifactStore(self.weights.parents[1])
        return store.lookup(self.weights.parent.name, self.weights.name)


# Pretraining from random init: what a run without `pretrain.init_from` starts from.
SCRATCH = InitPoint()


def weights_identity(path: Path) -> str | None:
    """A published artifact's `<stage>:<key>`; weights outside a store by their content; None
    where there are none to load."""
    if (path / MANIFEST_FILE).is_file():
        recorded = read_manifest(path / MANIFEST_FILE)
        return f"{recorded['stage']}:{recorded['key']}"
    if not (path / WEIGHTS_FILE).is_file():
        return None
    return f"weights:{hashlib.sha256((path / WEIGHTS_FILE).read_bytes()).hexdigest()[:20]}"


def read_lineage(directory: Path) -> dict[str, Any] | None:
    """The checkpoint the weights in `directory` descend from, if any: the one reader of
    lineage.json, called once per run (by `InitPoint`)."""
    path = directory / LINEAGE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


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
) -> tuple[dict[str, Any], list[str], InitPoint]:
    """`config` adopting the checkpoint `pretrain.init_from` names, the notes to print, and the
    starting point it resolves to.

    Called once per run, by `resolve_run` (flows/resolve.py) where the run enters: a folder or a
    Hub name is adopted at once, before anything starts; a `models:/` URI once `resolve` (the
    pipeline's tracker) can look it up. A pretrain artifact of this store needs nothing adopted:
    its run already fixed the shape.
    """
    check_teacher(config.get("distill") or {})
    init_from = config.get("pretrain", {}).get("init_from")
    if init_from is None or (is_registry_uri(init_from) and resolve is None):
        check_extension(config, init_from is not None)
        if init_from is None:
            check_head_warmup(config)
        return config, [], InitPoint.of_adopted(init_from)
    uri = init_from if is_registry_uri(init_from) else None
    folder = resolve(init_from) if resolve and uri else locate(init_from)
    if is_checkpoint_folder(folder):
        config, notes = adopt_checkpoint(config, folder)
    else:
        check_extension(config, False)
        if not (folder / CONFIG_FILE).is_file():
            raise ConfigError(
                f"pretrain.init_from={init_from!r} is neither a transformers checkpoint (no "
                f"{HF_CONFIG_FILE}) nor a pretrain artifact (no {CONFIG_FILE}): give the folder "
                "save_pretrained or huggingface-cli download wrote, <artifact root>/pretrain/"
                "<key>, or a models:/<name>@<alias> URI"
            )
        config, notes = {**config, "pretrain": {**config["pretrain"], "init_from": str(folder)}}, []
    return config, notes, replace(InitPoint.of_adopted(str(folder)), registry_uri=uri)


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


def explicit_trainer_keys(values: dict[str, Any], groups: dict[str, str]) -> set[str]:
    """The `trainer.*` keys the user set: by name, or all of them with a `trainer=` preset."""
    if "trainer" in groups:
        return set(CONTINUATION)
    return {key.removeprefix("trainer.") for key in values if key.startswith("trainer.")}


def continuation_recipe(
    config: dict[str, Any],
    explicit: set[str],
    has_mlm_head: bool,
) -> tuple[dict[str, Any], str]:
    """`config` with the continuation recipe where the user set nothing, and the note's words."""
    trainer = dict(config["trainer"])
    adopted = {key: value for key, value in CONTINUATION.items() if key not in explicit}
    kept = sorted(set(CONTINUATION) & explicit)
    trainer |= adopted
    pretrain = dict(config["pretrain"])
    mlm = config.get("objective", {}).get("kind", "mlm") == "mlm"
    if pretrain.get("head_warmup_steps") is None:
        steps = HEAD_WARMUP_STEPS if mlm and not has_mlm_head else 0
        if trainer.get("max_tokens") is None:
            steps = min(steps, int(trainer["max_steps"]) // 2)  # a short run keeps half
        pretrain["head_warmup_steps"] = steps
    words = "continuation recipe: " + ", ".join(f"trainer.{k}={v}" for k, v in adopted.items())
    if kept:
        words += f" (yours kept: {', '.join(f'trainer.{key}' for key in kept)})"
    if pretrain["head_warmup_steps"]:
        head = (
            "its MLM head trains alone first"
            if has_mlm_head
            else "the checkpoint has no MLM head: a new one trains alone"
        )
        words += (
            f"; {head} for pretrain.head_warmup_steps={pretrain['head_warmup_steps']} steps, "
            "encoder frozen"
        )
    return {**config, "trainer": trainer, "pretrain": pretrain}, words
