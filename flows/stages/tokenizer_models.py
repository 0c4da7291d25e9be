"""The three tokenizer families, each assembled from `tokenizers` parts as its model family does.

WordPiece is BERT's (BERT normaliser and pre-tokeniser, `##` continuations); byte-level BPE is
RoBERTa's (no unknown tokens: every byte is in the alphabet); Unigram is ALBERT's and
SentencePiece's (NFKC, `▁` marks word starts).
"""

from __future__ import annotations

from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

TOKENIZER_KINDS = ("wordpiece", "bpe", "unigram")


def build_tokenizer(
    kind: str,
    vocab_size: int,
    lowercase: bool,
    min_frequency: int,
    special_tokens: list[str],
    unk_token: str,
) -> tuple[Tokenizer, Any]:
    """An untrained tokenizer and its trainer; special tokens take the first ids, in order."""
    if kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token=unk_token))
        tokenizer.normalizer = normalizers.BertNormalizer(
            lowercase=lowercase, strip_accents=lowercase or None
        )
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        return tokenizer, trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=special_tokens
        )
    steps: list[normalizers.Normalizer] = [
        normalizers.NFC() if kind == "bpe" else normalizers.NFKC()
    ]
    if lowercase:
        steps.append(normalizers.Lowercase())
    if kind == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=unk_token))
        tokenizer.normalizer = normalizers.Sequence(steps)
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tokenizer.decoder = decoders.ByteLevel()
        return tokenizer, trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=special_tokens,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    return tokenizer, trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=special_tokens, unk_token=unk_token
    )
