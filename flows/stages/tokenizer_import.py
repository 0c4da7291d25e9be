"""Stage 1 for a run that continues a `transformers` checkpoint: its tokenizer, imported.

A checkpoint's embeddings are rows of its own vocabulary, so continuing it must tokenize exactly
as it was trained: the tokenizer is converted once by `transformers` itself (`AutoTokenizer`
reads `tokenizer.json`, or `vocab.txt`, `vocab.json` + `merges.txt`, `spiece.model`), so ids are
those of `AutoTokenizer.from_pretrained` on the same text, with the checkpoint's normaliser,
casing, special tokens and post-processor. It is published like a trained tokenizer (same files,
so every later stage reads it unchanged), keyed by the content of the files it came from.

What it is worth on this corpus (fertility, unknown rate) is measured each run on the corpus's
first documents and reported with the stage, not stored: the artifact is the same for any corpus.
"""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from flows.core.artifacts import ArtifactRef, ArtifactStore, file_sha256, stage_key
from flows.core.outputs import StageOutputs
from flows.corpora import Corpus
from flows.corpora.formats import CorpusInputError
from flows.stages.tokenizer import (
    SETTINGS_FILE,
    SPECIAL_ROLES,
    SPECIAL_TOKENS_FILE,
    STAGE,
    STATS_DOCUMENTS,
    TOKENIZER_FILE,
    TokenizerSettings,
    load_tokenizer,
    measure,
)

IMPORT_VERSION = 1
# What `AutoTokenizer` may read from a checkpoint folder; config.json tells it the model type.
SOURCE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "config.json",
)
# Files that hold a vocabulary (without one, `transformers` builds a tokenizer of special tokens).
VOCABULARY_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
)
# Copied into the artifact: an export back to `transformers` keeps the tokenizer's class.
SOURCE_DIR = "source"
KEPT_SOURCE_FILES = ("tokenizer_config.json", "special_tokens_map.json")
KINDS = {"WordPiece": "wordpiece", "BPE": "bpe", "Unigram": "unigram"}


@dataclass(frozen=True)
class ImportedTokenizerOutputs(StageOutputs):
    """The imported vocabulary, and how it fits this run's corpus (measured, not stored)."""

    STAGE = STAGE
    imported_from: str
    vocab_size: int
    fertility: float = 0.0
    unknown_rate: float = 0.0
    measured_documents: int = 0


def source_checksums(folder: Path) -> dict[str, str]:
    """The tokenizer files of `folder` by content: the artifact's identity."""
    return {name: file_sha256(folder / name) for name in SOURCE_FILES if (folder / name).is_file()}


def auto_tokenizer(folder: Path) -> Any:
    """The fast tokenizer `transformers` builds from the folder; a folder without one is a
    CorpusInputError (an input error: exit 2, never retried) naming it."""
    from transformers import AutoTokenizer  # slow to import; only a checkpoint run needs it

    if not any((folder / name).is_file() for name in VOCABULARY_FILES):
        raise CorpusInputError(
            f"pretrain.init_from={folder} holds no tokenizer: it needs tokenizer.json, or "
            "vocab.txt, vocab.json + merges.txt, or spiece.model (download the checkpoint's "
            "tokenizer files too)"
        )
    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError) as error:
        raise CorpusInputError(
            f"pretrain.init_from={folder}: transformers could not load its tokenizer "
            f"({str(error).splitlines()[0]}); the folder needs tokenizer.json, or vocab.txt, "
            "vocab.json + merges.txt, or spiece.model"
        ) from None


def special_tokens(hf: Any, folder: Path) -> dict[str, str]:
    """Role -> token as the checkpoint names them (RoBERTa's `<s>` is its [CLS])."""
    tokens = {role: getattr(hf, f"{role}_token", None) for role in SPECIAL_ROLES}
    missing = [role for role, token in tokens.items() if not token]
    if missing:
        raise CorpusInputError(
            f"pretrain.init_from={folder}: its tokenizer defines no {', '.join(missing)} token; "
            "masked-language modelling needs pad, unk, cls, sep and mask"
        )
    return {role: str(token) for role, token in tokens.items()}


def converted(hf: Any, folder: Path) -> tuple[Tokenizer, str]:
    """The backend tokenizer, with no truncation or padding (shards pack whole documents), and
    its family."""
    backend = Tokenizer.from_str(hf.backend_tokenizer.to_str())
    backend.no_truncation()
    backend.no_padding()
    family = json.loads(backend.to_str())["model"]["type"]
    if family not in KINDS:
        raise CorpusInputError(
            f"pretrain.init_from={folder}: its tokenizer is a {family} model; Cloze reads "
            f"{', '.join(KINDS)} tokenizers"
        )
    return backend, KINDS[family]


def import_tokenizer(folder: Path, corpus: Corpus, store: ArtifactStore) -> ArtifactRef:
    """The checkpoint's tokenizer as a tokenizer artifact, with its fit to `corpus` measured."""
    record = {"settings": {"imported": True}, "inputs": {"files": source_checksums(folder)}}
    key = stage_key(STAGE, IMPORT_VERSION, record["settings"], record["inputs"])

    def build(directory: Path) -> dict[str, Any]:
        hf = auto_tokenizer(folder)
        tokens = special_tokens(hf, folder)
        backend, kind = converted(hf, folder)
        ids = {role: backend.token_to_id(token) for role, token in tokens.items()}
        settings = TokenizerSettings(
            kind=kind,
            vocab_size=backend.get_vocab_size(),
            lowercase=bool(getattr(hf, "do_lower_case", False)),
            special_tokens=tokens,
        )
        backend.save(str(directory / TOKENIZER_FILE))
        (directory / SPECIAL_TOKENS_FILE).write_text(json.dumps(ids, indent=2))
        (directory / SETTINGS_FILE).write_text(settings.model_dump_json(indent=2))
        (directory / SOURCE_DIR).mkdir()
        for name in KEPT_SOURCE_FILES:
            if (folder / name).is_file():
                shutil.copyfile(folder / name, directory / SOURCE_DIR / name)
        return ImportedTokenizerOutputs(
            imported_from=folder.name, vocab_size=settings.vocab_size
        ).to_manifest()

    ref = store.get_or_build(STAGE, key, build, record, content_addressed=True)
    return replace(ref, outputs={**ref.outputs, **fit_to_corpus(ref, corpus)})


def fit_to_corpus(ref: ArtifactRef, corpus: Corpus) -> dict[str, Any]:
    """Fertility and unknown rate on the corpus's first documents: what the vocabulary, made
    for other text, costs on this one."""
    trained = load_tokenizer(ref)
    documents = list(itertools.islice(corpus.documents(), STATS_DOCUMENTS))
    fertility, unknown_rate = measure(trained.tokenizer, documents, trained.special.unk)
    return {
        "fertility": fertility,
        "unknown_rate": unknown_rate,
        "measured_documents": len(documents),
    }
