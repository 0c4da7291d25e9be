"""Stage 1: train a tokenizer (WordPiece, BPE or Unigram) and measure it on held-out documents.

WordPiece and BPE training is byte-reproducible across processes (see `tokenizer_models`);
Unigram training is not. The artifact is therefore published by content: its key is a hash of
its files, the input key (settings and corpus) links to it, and every later stage keys on that
content key. A store can never pair one build's shards or models with another build's tokenizer,
and a second build for the same input key (another machine's, racing this one) adopts the first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import field_validator
from tokenizers import Tokenizer, processors

from flows.core.artifacts import (
    MANIFEST_FILE,
    ArtifactError,
    ArtifactRef,
    ArtifactStore,
    is_store_name,
    read_manifest,
    stage_key,
)
from flows.core.outputs import StageOutputs
from flows.core.settings import ConfigError, Number, Settings, bounds, one_of, output_settings
from flows.corpora import Corpus
from flows.corpora.base import empty_corpus_error
from flows.stages.tokenizer_models import TOKENIZER_KINDS, TokenizerRecipe, train

STAGE = "tokenizer"
VERSION = 4
TOKENIZER_FILE = "tokenizer.json"
SPECIAL_TOKENS_FILE = "special_tokens.json"
SETTINGS_FILE = "tokenizer_settings.json"
SPECIAL_ROLES = ("pad", "unk", "cls", "sep", "mask")
STATS_DOCUMENTS = 2000


DEFAULT_SPECIAL_TOKENS = {
    "pad": "[PAD]",
    "unk": "[UNK]",
    "cls": "[CLS]",
    "sep": "[SEP]",
    "mask": "[MASK]",
}


# The smallest vocabulary a run trains with: special tokens and a few pieces leave nothing to learn.
MIN_VOCABULARY = 100


class TokenizerSettings(Settings):
    """`tokenizer.*`."""

    section = "tokenizer"
    kind: Annotated[str, one_of(TOKENIZER_KINDS)] = "wordpiece"
    """wordpiece (BERT) | bpe (RoBERTa's byte level) | unigram (ALBERT's, SentencePiece's)."""
    vocab_size: Annotated[int, bounds(ge=MIN_VOCABULARY, le=1 << 24)] = 8000
    """Tokens in the vocabulary, special tokens included."""
    lowercase: bool = True
    """Lowercase the text before tokenizing."""
    min_frequency: Annotated[int, bounds(ge=1)] = 2
    """Fewest occurrences for a merge or piece (the Unigram trainer ignores it)."""
    max_training_mb: Annotated[Number, bounds(gt=0)] | None = 256
    """Train on at most this much text, spread over every file; null: all of it."""
    from_artifact: str | None = None
    """Reuse a tokenizer or pretrain artifact's tokenizer instead of training (out of the key)."""
    extend_vocabulary: Annotated[int, bounds(ge=0)] = 0
    """With a checkpoint: add its N most split corpus words (3+ pieces) as tokens; 0: off."""
    special_tokens: dict[str, str] = DEFAULT_SPECIAL_TOKENS
    """The pad, unk, cls, sep and mask tokens' text."""

    @field_validator("special_tokens")
    @classmethod
    def _every_role_once(cls, tokens: dict[str, str]) -> dict[str, str]:
        if sorted(tokens) != sorted(SPECIAL_ROLES):
            raise ConfigError(f"tokenizer.special_tokens must define exactly {SPECIAL_ROLES}")
        return tokens


@dataclass(frozen=True)
class TokenizerOutputs(StageOutputs):
    """The tokenizer's figures: how well its vocabulary fits held-out documents."""

    STAGE = STAGE
    vocab_size: int
    training_seconds: float
    corpus_documents: int
    fertility: float  # tokens per whitespace word
    unknown_rate: float
    heldout_documents: int


@dataclass(frozen=True)
class SpecialTokenIds:
    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    def all(self) -> list[int]:
        return [self.pad, self.unk, self.cls, self.sep, self.mask]


@dataclass(frozen=True)
class TrainedTokenizer:
    tokenizer: Tokenizer
    special: SpecialTokenIds
    settings: TokenizerSettings

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()


def load_tokenizer(ref: ArtifactRef) -> TrainedTokenizer:
    tokenizer = Tokenizer.from_file(str(ref.path / TOKENIZER_FILE))
    special = SpecialTokenIds(**json.loads((ref.path / SPECIAL_TOKENS_FILE).read_text()))
    settings = TokenizerSettings(**json.loads((ref.path / SETTINGS_FILE).read_text()))
    return TrainedTokenizer(tokenizer, special, settings)


def special_token_id(tokenizer: Tokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise RuntimeError(f"special token {token!r} is missing from the trained vocabulary")
    return token_id


def measure(tokenizer: Tokenizer, documents: list[str], unk_id: int) -> tuple[float, float]:
    """Fertility (tokens per whitespace word) and unknown rate: how well the vocab fits new text."""
    encodings = tokenizer.encode_batch(documents, add_special_tokens=False)
    tokens = sum(len(encoding.ids) for encoding in encodings)
    unknown = sum(encoding.ids.count(unk_id) for encoding in encodings)
    words = sum(len(document.split()) for document in documents)
    return tokens / max(words, 1), unknown / max(tokens, 1)


def reused_tokenizer(source: str, store: ArtifactStore) -> ArtifactRef:
    """`tokenizer.from_artifact`: a published tokenizer, given directly or through a pretrain run.

    Continued pretraining on a new corpus must keep the vocabulary its embeddings were trained
    on; a tokenizer retrained on the new corpus may even have the same size but other ids.
    """
    path = Path(source).expanduser().resolve()
    if not (path / MANIFEST_FILE).is_file():
        raise ConfigError(
            f"tokenizer.from_artifact={source!r} is not a published artifact directory (no "
            f"{MANIFEST_FILE}); give <artifact root>/tokenizer/<key> or .../pretrain/<key>"
        )
    manifest = path / MANIFEST_FILE
    recorded = read_manifest(manifest)
    if recorded.get("stage") == STAGE:  # read (and verified) by its store, `<root>/tokenizer/<key>`
        key, store = path.name, ArtifactStore(path.parents[1])
    else:
        key = recorded.get("inputs", {}).get("tokenizer")
    if key is not None and not is_store_name(key):
        raise ArtifactError(
            f"{manifest} records tokenizer key {key!r}, which is not a store key and could "
            f"point outside the artifact store {store.root}; refused"
        )
    found = store.lookup(STAGE, key) if isinstance(key, str) else None
    if found is None:
        raise ConfigError(
            f"tokenizer.from_artifact={source!r} is a {recorded['stage']} artifact whose "
            f"tokenizer ({key}) is not in the artifact store {store.root}; give the tokenizer "
            "artifact directory itself"
        )
    return found


def tokenizer_record(settings: TokenizerSettings, corpus: dict[str, Any]) -> dict[str, Any]:
    """What the tokenizer's artifact key is made of: its settings and the corpus fingerprint."""
    return {
        "settings": output_settings(settings, exclude=("from_artifact", "extend_vocabulary")),
        "inputs": {"corpus": corpus},
    }


def train_tokenizer(
    settings: TokenizerSettings, corpus: Corpus, store: ArtifactStore
) -> ArtifactRef:
    if settings.from_artifact is not None:
        return reused_tokenizer(settings.from_artifact, store)
    record = tokenizer_record(settings, corpus.fingerprint())
    key = stage_key(STAGE, VERSION, record["settings"], record["inputs"])

    def build(directory: Path) -> dict[str, Any]:
        specials = settings.special_tokens
        started = time.perf_counter()
        heldout: list[str] = []
        budget = None if settings.max_training_mb is None else int(settings.max_training_mb * 1e6)

        def documents() -> Iterator[str]:
            heldout.clear()  # each pass reads the same documents and collects them afresh
            return corpus.training_documents(heldout, STATS_DOCUMENTS, budget)

        recipe = TokenizerRecipe(
            settings.kind,
            settings.vocab_size,
            settings.lowercase,
            settings.min_frequency,
            [specials[role] for role in SPECIAL_ROLES],
            specials["unk"],
        )
        tokenizer = train(recipe, documents)
        seconds = time.perf_counter() - started
        if corpus.stats.documents == 0:
            raise empty_corpus_error(corpus, corpus.stats)
        ids = {role: special_token_id(tokenizer, specials[role]) for role in SPECIAL_ROLES}
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{specials['cls']} $A {specials['sep']}",
            pair=f"{specials['cls']} $A {specials['sep']} $B:1 {specials['sep']}:1",
            special_tokens=[(specials["cls"], ids["cls"]), (specials["sep"], ids["sep"])],
        )
        tokenizer.save(str(directory / TOKENIZER_FILE))
        (directory / SPECIAL_TOKENS_FILE).write_text(json.dumps(ids, indent=2))
        (directory / SETTINGS_FILE).write_text(json.dumps(record["settings"], indent=2))
        fertility, unknown_rate = measure(tokenizer, heldout, ids["unk"])
        return TokenizerOutputs(
            vocab_size=tokenizer.get_vocab_size(),
            training_seconds=seconds,
            corpus_documents=corpus.stats.documents,
            fertility=fertility,
            unknown_rate=unknown_rate,
            heldout_documents=len(heldout),
        ).to_manifest()

    return store.get_or_build(STAGE, key, build, record, content_addressed=True)
