"""The three tokenizer families, each assembled from `tokenizers` parts as its model family does.

WordPiece is BERT's (BERT normaliser and pre-tokeniser, `##` continuations); byte-level BPE is
RoBERTa's (no unknown tokens: every byte is in the alphabet); Unigram is ALBERT's and
SentencePiece's (NFKC, `▁` marks word starts).

Reproducibility, measured across processes on the same documents: BPE is byte-identical as
`tokenizers` trains it. WordPiece is not: its trainer gives each continuation symbol (`##e`) an id
in hash-map order, which differs per process, and merge ties break by id; `train` makes it
deterministic by declaring every continuation symbol up front, in sorted order. Unigram is not
either (its EM sums floats in hash-map order; scores differ in the fourth decimal and reorder
the vocabulary) and no input order fixes it: the tokenizer stage publishes by content instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

TOKENIZER_KINDS = ("wordpiece", "bpe", "unigram")
CONTINUATION_PREFIX = "##"  # WordPiece's mark of a symbol inside a word


@dataclass(frozen=True)
class TokenizerRecipe:
    """What shapes a tokenizer before it reads a document: family, vocabulary, special tokens."""

    kind: str
    vocab_size: int
    lowercase: bool
    min_frequency: int
    special_tokens: list[str]
    unk_token: str


def build_tokenizer(recipe: TokenizerRecipe) -> tuple[Tokenizer, Any]:
    """An untrained tokenizer and its trainer; special tokens take the first ids, in order."""
    if recipe.kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token=recipe.unk_token))
        tokenizer.normalizer = normalizers.BertNormalizer(
            lowercase=recipe.lowercase, strip_accents=recipe.lowercase or None
        )
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        return tokenizer, trainers.WordPieceTrainer(
            vocab_size=recipe.vocab_size,
            min_frequency=recipe.min_frequency,
            special_tokens=recipe.special_tokens,
            show_progress=False,  # off a terminal its bars print only blank lines (6 a run)
        )
    steps: list[normalizers.Normalizer] = [
        normalizers.NFC() if recipe.kind == "bpe" else normalizers.NFKC()
    ]
    if recipe.lowercase:
        steps.append(normalizers.Lowercase())
    if recipe.kind == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=recipe.unk_token))
        tokenizer.normalizer = normalizers.Sequence(steps)
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tokenizer.decoder = decoders.ByteLevel()
        return tokenizer, trainers.BpeTrainer(
            vocab_size=recipe.vocab_size,
            min_frequency=recipe.min_frequency,
            special_tokens=recipe.special_tokens,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    return tokenizer, trainers.UnigramTrainer(
        vocab_size=recipe.vocab_size,
        special_tokens=recipe.special_tokens,
        unk_token=recipe.unk_token,
        show_progress=False,
    )


def train(recipe: TokenizerRecipe, documents: Callable[[], Iterable[str]]) -> Tokenizer:
    """A trained tokenizer; `documents()` yields the same documents each call (WordPiece reads
    them twice: once to find its continuation symbols, once to train)."""
    declared: list[str] = []
    if recipe.kind == "wordpiece":
        declared = continuation_symbols(
            documents(), recipe.lowercase, recipe.special_tokens, recipe.unk_token
        )
    tokenizer, trainer = build_tokenizer(
        replace(recipe, special_tokens=recipe.special_tokens + declared)
    )
    tokenizer.train_from_iterator(documents(), trainer)
    return without_added_tokens(tokenizer, set(declared)) if declared else tokenizer


def continuation_symbols(
    documents: Iterable[str], lowercase: bool, special_tokens: list[str], unk_token: str
) -> list[str]:
    """Every `##c` the WordPiece trainer would create, sorted: read off a training with no merges.

    Declared as the trainer's special tokens, they take ids in this order before training
    starts, so no id (and no tie between merges) depends on the trainer's hash-map order.
    """
    probe, trainer = build_tokenizer(
        TokenizerRecipe("wordpiece", 1, lowercase, 1, special_tokens, unk_token)
    )
    probe.train_from_iterator(documents, trainer)
    width = len(CONTINUATION_PREFIX) + 1
    return sorted(
        token
        for token in probe.get_vocab()
        if token.startswith(CONTINUATION_PREFIX)
        and len(token) == width
        and token not in special_tokens
    )


def without_added_tokens(tokenizer: Tokenizer, tokens: set[str]) -> Tokenizer:
    """`tokenizer` with `tokens` kept in its vocabulary but no longer matched as added tokens.

    Training registers every declared special token as an added token, which would split the
    literal text `##e` out of any input; the continuation symbols must stay ordinary entries.
    """
    data = json.loads(tokenizer.to_str())
    data["added_tokens"] = [
        added for added in data["added_tokens"] if added["content"] not in tokens
    ]
    return Tokenizer.from_str(json.dumps(data))
