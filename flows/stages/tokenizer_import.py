"""Stage 1 for a run that continues a `transformers` checkpoint: its tokenizer, imported.

A checkpoint's embeddings are rows of its own vocabulary, so continuing it must tokenize exactly
as it was trained: the tokenizer is converted once by `transformers` itself (`AutoTokenizer`
reads `tokenizer.json`, or `vocab.txt`, `vocab.json` + `merges.txt`, `spiece.model`), so ids are
those of `AutoTokenizer.from_pretrained` on the same text, with the checkpoint's normaliser,
casing, special tokens and post-processor. It is published like a trained tokenizer (same files,
so every later stage reads it unchanged), keyed by the content of the files it came from.

What it is worth on this corpus (fertility, unknown rate) is measured each run on the corpus's
first documents and reported with the stage, not stored: the artifact is the same for any corpus.

`tokenizer.extend_vocabulary=N` adds the N most frequent corpus words the checkpoint's tokenizer
splits into three or more pieces, as whole-word tokens (BioBERT kept BERT's vocabulary; SciBERT
and others argue for domain words). That artifact depends on the corpus too, and records each
added word's pieces (`extension.json`): the checkpoint import starts the new embedding rows at
the mean of those pieces' rows.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from tokenizers import AddedToken, Tokenizer

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
    special_token_id,
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
EXTENSION_FILE = "extension.json"  # the added words, their counts and their pieces' ids
MIN_PIECES = 3  # a word the checkpoint splits this finely is worth a token of its own
WORD = re.compile(r"[^\W\d_]{3,}")  # letters only: numbers and codes are poor token candidates


@dataclass(frozen=True)
class ImportedTokenizerOutputs(StageOutputs):
    """The imported vocabulary, and how it fits this run's corpus (measured, not stored)."""

    STAGE = STAGE
    imported_from: str
    vocab_size: int
    added_words: int = 0  # tokenizer.extend_vocabulary: how many were added
    fertility_before_extension: float | None = None
    fertility: float = 0.0
    unknown_rate: float = 0.0
    measured_documents: int = 0

    # Measured on each run's corpus (fit_to_corpus), so never written into the manifest.
    CORPUS_FIT: ClassVar[tuple[str, ...]] = ("fertility", "unknown_rate", "measured_documents")

    def to_manifest(self) -> dict[str, Any]:
        stored = super().to_manifest()
        return {name: value for name, value in stored.items() if name not in self.CORPUS_FIT}


def source_checksums(folder: Path) -> dict[str, str]:
    """The tokenizer files of `folder` by content: the artifact's identity."""
    return {name: file_sha256(folder / name) for name in SOURCE_FILES if (folder / name).is_file()}


def auto_tokenizer(folder: Path, key: str) -> Any:
    """The fast tokenizer `transformers` builds from the folder; a folder without one is a
    CorpusInputError (an input error: exit 2, never retried) naming it under `key`, the setting
    the user gave it in (`pretrain.init_from` or `distill.teacher`)."""
    from transformers import AutoTokenizer  # slow to import; only a checkpoint run needs it

    if not any((folder / name).is_file() for name in VOCABULARY_FILES):
        raise CorpusInputError(
            f"{key}={folder} holds no tokenizer: it needs tokenizer.json, or "
            "vocab.txt, vocab.json + merges.txt, or spiece.model (download the checkpoint's "
            "tokenizer files too)"
        )
    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError) as error:
        raise CorpusInputError(
            f"{key}={folder}: transformers could not load its tokenizer "
            f"({str(error).splitlines()[0]}); the folder needs tokenizer.json, or vocab.txt, "
            "vocab.json + merges.txt, or spiece.model"
        ) from None


def special_tokens(hf: Any, folder: Path, key: str) -> dict[str, str]:
    """Role -> token as the checkpoint names them (RoBERTa's `<s>` is its [CLS])."""
    tokens = {role: getattr(hf, f"{role}_token", None) for role in SPECIAL_ROLES}
    missing = [role for role, token in tokens.items() if not token]
    if missing:
        raise CorpusInputError(
            f"{key}={folder}: its tokenizer defines no {', '.join(missing)} token; "
            "masked-language modelling needs pad, unk, cls, sep and mask"
        )
    return {role: str(token) for role, token in tokens.items()}


def converted(hf: Any, folder: Path, key: str) -> tuple[Tokenizer, str]:
    """The backend tokenizer, with no truncation or padding (shards pack whole documents), and
    its family."""
    backend = Tokenizer.from_str(hf.backend_tokenizer.to_str())
    backend.no_truncation()
    backend.no_padding()
    family = json.loads(backend.to_str())["model"]["type"]
    if family not in KINDS:
        raise CorpusInputError(
            f"{key}={folder}: its tokenizer is a {family} model; Cloze reads "
            f"{', '.join(KINDS)} tokenizers"
        )
    return backend, KINDS[family]


def import_tokenizer(
    folder: Path,
    corpus: Corpus | None,
    store: ArtifactStore,
    extend_vocabulary: int = 0,
    max_chars: int | None = None,
    key: str = "pretrain.init_from",
) -> ArtifactRef:
    """The checkpoint's tokenizer as a tokenizer artifact (extended by the corpus's most split
    words when asked; `max_chars` bounds the text counted), with its fit to `corpus` measured
    (`cloze evaluate` has no corpus: nothing is measured, and nothing can extend it). A fault
    names `key`, the setting that gave the folder (a teacher's is `distill.teacher`)."""
    assert corpus is not None or not extend_vocabulary, "an extension counts the corpus's words"
    record: dict[str, Any] = {
        "settings": {"imported": True},
        "inputs": {"files": source_checksums(folder)},
    }
    if extend_vocabulary and corpus is not None:  # absent otherwise: keyed on the files alone
        record["settings"] |= {"extend_vocabulary": extend_vocabulary, "max_chars": max_chars}
        record["inputs"]["corpus"] = corpus.fingerprint()
    artifact_key = stage_key(STAGE, IMPORT_VERSION, record["settings"], record["inputs"])

    def build(directory: Path) -> dict[str, Any]:
        hf = auto_tokenizer(folder, key)
        tokens = special_tokens(hf, folder, key)
        backend, kind = converted(hf, folder, key)
        extension: dict[str, Any] = {}
        if extend_vocabulary and corpus is not None:
            unknown = special_token_id(backend, tokens["unk"])
            extension = extend(backend, kind, corpus, extend_vocabulary, max_chars, unknown)
            (directory / EXTENSION_FILE).write_text(json.dumps(extension, indent=2))
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
            imported_from=folder.name,
            vocab_size=settings.vocab_size,
            added_words=len(extension.get("added", [])),
            fertility_before_extension=extension.get("fertility_before"),
        ).to_manifest()

    ref = store.get_or_build(STAGE, artifact_key, build, record, content_addressed=True)
    if corpus is None:
        return ref
    return replace(ref, outputs={**ref.outputs, **fit_to_corpus(ref, corpus)})


def extend(
    backend: Tokenizer,
    kind: str,
    corpus: Corpus,
    count: int,
    max_chars: int | None,
    unknown: int,
) -> dict[str, Any]:
    """Adds (in place) the `count` most frequent corpus words `backend` splits into at least
    MIN_PIECES pieces; returns them with their pieces and the fertility before."""
    heldout: list[str] = []
    words = word_counts(backend, corpus.training_documents(heldout, STATS_DOCUMENTS, max_chars))
    fertility_before, _ = measure(backend, heldout, unknown)
    added: list[dict[str, Any]] = []
    for word, occurrences in words.most_common():
        pieces = backend.encode(f" {word}", add_special_tokens=False).ids
        if len(pieces) >= MIN_PIECES:
            added.append({"word": word, "count": occurrences, "pieces": pieces})
        if len(added) == count:
            break
    # Whole words only; byte-level and metaspace tokenizers glue the space before a word to it,
    # so the added token takes the space in (lstrip) instead of leaving a token of its own.
    backend.add_tokens(
        [AddedToken(entry["word"], single_word=True, lstrip=kind != "wordpiece") for entry in added]
    )
    for entry in added:
        entry["id"] = backend.token_to_id(entry["word"])
    return {"added": added, "fertility_before": fertility_before}


def word_counts(backend: Tokenizer, documents: Iterable[str]) -> Counter[str]:
    """Letter words as the tokenizer's normaliser writes them (lowercased if it lowercases)."""
    normalizer = backend.normalizer
    counts: Counter[str] = Counter()
    for document in documents:
        text = document if normalizer is None else normalizer.normalize_str(document)
        counts.update(WORD.findall(text))
    return counts


def read_extension(ref: ArtifactRef) -> list[dict[str, Any]]:
    """The words a tokenizer artifact added to its checkpoint's vocabulary (none: [])."""
    path = ref.path / EXTENSION_FILE
    return json.loads(path.read_text())["added"] if path.is_file() else []


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
