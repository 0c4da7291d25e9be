"""A `transformers` checkpoint folder checked whole before any stage runs, under the key the user
gave it (`pretrain.init_from` or `distill.teacher`).

config.json must describe a model Cloze imports; the weights must be whole and of the shape
config.json describes (read from the safetensors headers, no tensor loaded); the tokenizer must
fit the embedding table and be large enough to train. A fault found here costs a second; found by
the checkpoint stage, it cost the tokenizer stage first and was reported under another key.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from flows.core.settings import ConfigError
from flows.stages.tokenizer import MIN_VOCABULARY
from flows.stages.tokenizer_import import VOCABULARY_FILES

if TYPE_CHECKING:
    from lightning_modules.transformers_import import CheckpointShape


def read_shape(folder: Path, key: str = "pretrain.init_from") -> CheckpointShape:
    """config.json read, the weights checked against it and the tokenizer against both, or one
    ConfigError naming `key`, the file and what is wrong.

    The import package loads torch, so it is imported here, by a run that continues a
    checkpoint (and imports its weights next), not with this module, which every run imports.
    """
    from lightning_modules.transformers_import import CheckpointError, peek_checkpoint
    from lightning_modules.transformers_import.preflight import check_weights

    try:
        shape = peek_checkpoint(folder)
        check_weights(shape)
    except CheckpointError as error:
        raise ConfigError(f"{key}={folder}: {error}") from None
    if not any((folder / name).is_file() for name in VOCABULARY_FILES):
        raise ConfigError(
            f"{key}={folder} holds no tokenizer: it needs tokenizer.json, or "
            "vocab.txt, vocab.json + merges.txt, or spiece.model (download the checkpoint's "
            "tokenizer files too)"
        )
    check_vocabulary(folder, shape.config.vocab_size, key)
    return shape


def check_vocabulary(folder: Path, rows: int, key: str) -> None:
    """Every token needs an embedding row (a table may have spare ones), and a vocabulary of a
    few dozen tokens leaves masked-language modelling nothing to learn."""
    config = folder / "config.json"
    if rows < MIN_VOCABULARY:
        raise ConfigError(
            f"{key}={folder}: {config} has vocab_size={rows}, too small to train (Cloze needs "
            f"at least {MIN_VOCABULARY} tokens); is this a test model?"
        )
    tokens = tokenizer_size(folder, key)
    if tokens is not None and tokens > rows:
        raise ConfigError(
            f"{key}={folder}: its tokenizer has {tokens} tokens but {config} vocab_size={rows} "
            "embedding rows; the files do not belong together"
        )


def tokenizer_size(folder: Path, key: str) -> int | None:
    """The tokens of the checkpoint's tokenizer, read from its file without `transformers`
    (slow to import); None for a SentencePiece model (the checkpoint stage checks it). A file
    that does not parse is named, with the parser's line and column."""
    from tokenizers import Tokenizer

    readers: tuple[tuple[str, Callable[[Path], int]], ...] = (
        ("tokenizer.json", lambda path: Tokenizer.from_file(str(path)).get_vocab_size()),
        ("vocab.txt", lambda path: sum(1 for _ in path.open(encoding="utf-8"))),
        ("vocab.json", lambda path: len(json.loads(path.read_text(encoding="utf-8")))),
    )
    for name, size in readers:
        path = folder / name
        if not path.is_file():
            continue
        try:
            return int(size(path))
        except Exception as error:  # tokenizers raises its own Exception for a malformed file
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ConfigError(
                f"{key}={folder}: {path} is not a readable tokenizer file ({reason}); download "
                "it again or remove it"
            ) from None
    return None
