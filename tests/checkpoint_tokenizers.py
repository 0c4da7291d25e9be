"""Tokenizer files as public checkpoints ship them, written offline: the tests never download.

Each family writes the files its `transformers` tokenizer reads (BERT's vocab.txt, RoBERTa's
vocab.json + merges.txt, ALBERT's spiece.model, or a tokenizer.json), trained here on a small
text so ids are real, plus a minimal config.json naming the model type when none is there yet.
`awkward_lines` is text that tokenizers get wrong when a normaliser or a special case is lost.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

TOKENIZER_FAMILIES = ("wordpiece", "wordpiece_cased", "bpe", "unigram", "tokenizer_json")
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
MODEL_TYPES = {
    "wordpiece": "bert",
    "wordpiece_cased": "bert",
    "bpe": "roberta",
    "unigram": "albert",
    "tokenizer_json": "roberta",
}
WORDS = (
    "the protein binds a receptor in human cells while mutations of the gene cause disease and "
    "patients with cancer received treatment after diagnosis of the syndrome in children"
).split()
UNICODE = ["café", "naïve", "Straße", "東京都", "ελληνικά", "😀", "e\u0301", "Ångström", "ﬁne"]


def training_text(lines: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS + UNICODE) for _ in range(rng.randrange(5, 20)))
        for _ in range(lines)
    ]


def awkward_lines(count: int = 3000, seed: int = 1) -> list[str]:
    """Sentences mixing cased words, accents, CJK, emoji, digits, punctuation and very long
    words (60 to 120 letters, past WordPiece's 100-character limit)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"

    def word() -> str:
        kind = rng.random()
        if kind < 0.05:
            return "".join(rng.choice(letters) for _ in range(rng.randrange(60, 120)))
        if kind < 0.2:
            return rng.choice(UNICODE)
        if kind < 0.3:
            return str(rng.randrange(10**6)) + rng.choice([",", ".", "%", ")", "-"])
        chosen = rng.choice(WORDS)
        return chosen.capitalize() if rng.random() < 0.3 else chosen

    return ["  ".join(word() for _ in range(rng.randrange(1, 25))) for _ in range(count)]


def write_tokenizer(folder: Path, family: str) -> int:
    """Writes `family`'s tokenizer files into `folder`; returns the vocabulary size."""
    folder.mkdir(parents=True, exist_ok=True)
    text = training_text()
    if family in ("wordpiece", "wordpiece_cased"):
        size = wordpiece_files(folder, text, lowercase=family == "wordpiece")
    elif family == "bpe":
        size = bpe_files(folder, text)
    elif family == "unigram":
        size = sentencepiece_file(folder, text)
    else:
        size = tokenizer_json(folder, text)
    config = folder / "config.json"
    if not config.is_file():
        config.write_text(json.dumps({"model_type": MODEL_TYPES[family]}))
    return size


def wordpiece_files(folder: Path, text: list[str], lowercase: bool) -> int:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator(
        text, trainers.WordPieceTrainer(vocab_size=400, special_tokens=BERT_SPECIALS)
    )
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in vocab))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": lowercase, "model_max_length": 512})
    )
    return len(vocab)


def bpe_files(folder: Path, text: list[str]) -> int:
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(text, vocab_size=400, special_tokens=ROBERTA_SPECIALS)
    tokenizer.save_model(str(folder))
    return tokenizer.get_vocab_size()


def sentencepiece_file(folder: Path, text: list[str]) -> int:
    import sentencepiece

    corpus = folder / "spm-training.txt"
    corpus.write_text("\n".join(text + awkward_lines(1000, seed=7)))  # enough distinct pieces
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(folder / "spiece"),
        vocab_size=300,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        pad_piece="<pad>",
        unk_piece="<unk>",
        bos_piece="[CLS]",
        eos_piece="[SEP]",
        user_defined_symbols=["[MASK]"],
        minloglevel=2,
    )
    corpus.unlink()
    (folder / "spiece.vocab").unlink()
    return sentencepiece.SentencePieceProcessor(
        model_file=str(folder / "spiece.model")
    ).vocab_size()


def tokenizer_json(folder: Path, text: list[str]) -> int:
    """RoBERTa's files converted by `transformers` into one tokenizer.json, then the slow files
    removed: the layout of most checkpoints published since 2020."""
    from transformers import AutoTokenizer

    size = bpe_files(folder, text)
    (folder / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    AutoTokenizer.from_pretrained(str(folder)).save_pretrained(str(folder))
    for name in ("vocab.json", "merges.txt"):
        (folder / name).unlink(missing_ok=True)
    return size
