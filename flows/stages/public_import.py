"""The weights of a `transformers` checkpoint, imported into Cloze's own format once.

A run that continues a public checkpoint starts pretraining from this artifact as it would from
one of its own pretrain artifacts (model_config.json, model.safetensors), and the finetune stage
evaluates it, untouched, as the `base` arm. The artifact is keyed by the content of the
checkpoint's files and of its imported tokenizer; `lineage.json` records where it came from, is
carried into every pretrain artifact continued from it, and lets the end of pretraining export
back to the checkpoint's own `transformers` class.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from flows.core.artifacts import ArtifactRef, ArtifactStore, file_sha256, stage_key
from flows.corpora.formats import CorpusInputError
from flows.stages.init_point import LINEAGE_FILE
from flows.stages.tokenizer import TOKENIZER_FILE, load_tokenizer
from flows.stages.tokenizer_import import SOURCE_DIR, read_extension
from flows.stages.training_types import CheckpointOutputs
from lightning_modules.models.electra import ElectraForPreTraining
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.models.serialization import (
    aliased_names,
    count_parameters,
    read_weights,
    save_masked_lm,
)
from lightning_modules.transformers_import import (
    CheckpointError,
    export_like,
    read_checkpoint,
    shape_of,
)

STAGE = CheckpointOutputs.STAGE
VERSION = 1
DISCRIMINATOR_HEAD_FILE = "discriminator_head.safetensors"
WEIGHT_PATTERNS = ("config.json", "*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin")


def weight_checksums(folder: Path) -> dict[str, str]:
    """config.json and the weight files by content: the checkpoint's identity."""
    return {
        path.name: file_sha256(path)
        for pattern in WEIGHT_PATTERNS
        for path in sorted(folder.glob(pattern))
        if path.is_file()
    }


def import_checkpoint(
    folder: Path,
    tokenizer_ref: ArtifactRef,
    store: ArtifactStore,
    key: str = "pretrain.init_from",
) -> ArtifactRef:
    """The checkpoint in `folder` as Cloze weights, for the vocabulary of `tokenizer_ref`; a
    fault names `key`, the setting that gave the folder (a teacher's is `distill.teacher`)."""
    record: dict[str, Any] = {
        "settings": {},
        "inputs": {"files": weight_checksums(folder), "tokenizer": tokenizer_ref.key},
    }
    artifact_key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])

    def build(directory: Path) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            imported = read_checkpoint(folder)
        except CheckpointError as error:
            raise CorpusInputError(f"{key}={folder}: {error}") from None
        trained = load_tokenizer(tokenizer_ref)
        added = read_extension(tokenizer_ref)
        rows = imported.shape.config.vocab_size
        check_vocabulary_fits(rows, trained.vocab_size - len(added), folder, key)
        with torch.random.fork_rng():
            torch.manual_seed(0)  # a head the checkpoint lacks starts the same in every import
            model = imported.masked_lm()
        model = with_vocabulary(model, trained.special.pad, trained.vocab_size, added)
        save_masked_lm(model, directory)
        if imported.discriminator_head is not None:
            save_file(dict(imported.discriminator_head), str(directory / DISCRIMINATOR_HEAD_FILE))
        shape = imported.shape
        lineage = {
            "model_type": shape.model_type,
            "architecture": shape.architecture,
            "name": folder.name,
            "source": str(folder),
            "weights_sha256": imported.weights_sha256,
            "has_mlm_head": imported.mlm_head is not None,
            "config": shape.hf_config,
        }
        (directory / LINEAGE_FILE).write_text(json.dumps(lineage, indent=2))
        return CheckpointOutputs(
            model_type=shape.model_type,
            architecture=shape.architecture,
            name=folder.name,
            parameters=count_parameters(model),
            has_mlm_head=imported.mlm_head is not None,
            import_seconds=time.perf_counter() - started,
        ).to_manifest()

    return store.get_or_build(STAGE, artifact_key, build, record)


def check_vocabulary_fits(rows: int, tokens: int, folder: Path, key: str) -> None:
    """Every id the checkpoint's own tokenizer gives must have an embedding row (a table may
    have spare rows; words added by tokenizer.extend_vocabulary get new ones)."""
    if tokens > rows:
        raise CorpusInputError(
            f"{key}={folder}: its tokenizer has {tokens} tokens but the model only "
            f"{rows} embedding rows (config.json vocab_size); the files do not belong together"
        )


# The rows of a masked LM that belong to a vocabulary id: embeddings in, and (untied) out.
VOCABULARY_ROWS = ("encoder.embeddings.word.weight", "head.bias", "head.word_embeddings.weight")


def with_vocabulary(
    model: BertForMaskedLM, pad: int, tokens: int, added: list[dict[str, Any]]
) -> BertForMaskedLM:
    """The model with the tokenizer's padding id (config.json may name another), and a row for
    every word the tokenizer added (tokenizer.extend_vocabulary): the mean of its pieces'
    rows, in and out, so a new word starts where the checkpoint's reading of it was."""
    rows = max(model.config.vocab_size, tokens)
    if model.config.pad_token_id == pad and rows == model.config.vocab_size and not added:
        return model
    aliases = aliased_names(model)  # the tied decoder: it follows the embeddings
    state = {name: t for name, t in model.state_dict().items() if name not in aliases}
    for name in VOCABULARY_ROWS:
        if name not in state:
            continue
        table = state[name]
        grown = torch.cat([table, table.new_zeros((rows - len(table), *table.shape[1:]))])
        for entry in added:
            grown[entry["id"]] = table[entry["pieces"]].mean(0)
        state[name] = grown
    rebuilt = BertForMaskedLM(replace(model.config, pad_token_id=pad, vocab_size=rows))
    missing, unexpected = rebuilt.load_state_dict(state, strict=False)
    assert set(missing) == aliased_names(rebuilt) and not unexpected, (missing, unexpected)
    return rebuilt


def load_discriminator_head(directory: Path) -> dict[str, torch.Tensor] | None:
    path = directory / DISCRIMINATOR_HEAD_FILE
    return read_weights(path) if path.is_file() else None


def export_as_base_class(
    model: BertForMaskedLM | ElectraForPreTraining,
    lineage: dict[str, Any],
    tokenizer_dir: Path,
    directory: Path,
) -> None:
    """A `transformers` folder of the checkpoint's own class (BERT stays BERT, RoBERTa RoBERTa),
    with the imported tokenizer and its original tokenizer_config.json."""
    tensors, config = export_like(model, shape_of(lineage["config"], Path(lineage["source"])))
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    shutil.copyfile(tokenizer_dir / TOKENIZER_FILE, directory / "tokenizer.json")
    source = tokenizer_dir / SOURCE_DIR
    if source.is_dir():
        for path in source.iterdir():
            shutil.copyfile(path, directory / path.name)
