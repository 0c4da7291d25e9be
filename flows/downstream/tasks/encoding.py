"""Examples to token ids.

Tagging follows BERT's NER recipe: a word's tag goes on its first sub-token, the other
sub-tokens get -100 (ignored by the loss). Plain lists, no torch: the up-front check of a run's
task files encodes rows before any training library is imported; training pads the ids into
tensors (flows/downstream/finetuning/recipe.py) and the task's kind scores the predictions
(flows/downstream/kinds/).
"""

from __future__ import annotations

from typing import Any

from tokenizers import Encoding, Tokenizer, models, pre_tokenizers, processors

from flows.downstream.tasks.readers import TaggedSentence, TextExample
from lightning_modules.models.config import IGNORE_INDEX

Item = dict[str, Any]


class EncodedSplit:
    """Token ids, segment ids and labels per example, plus the gold labels for scoring, and how
    many examples `max_length` cut short (reported: truncation costs what it cuts)."""

    def __init__(self, items: list[Item], gold: list[Any], truncated: int = 0) -> None:
        self.items = items
        self.gold = gold
        self.truncated = truncated

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, position: int) -> Item:
        return self.items[position]

    def subset(self, positions: list[int]) -> EncodedSplit:
        """Some examples (a seed's labelled sample); its truncation count is not tracked."""
        return EncodedSplit([self.items[p] for p in positions], [self.gold[p] for p in positions])


def first_subtoken_labels(encoding: Encoding, tags: tuple[int, ...]) -> list[int]:
    labels, previous = [], None
    for word in encoding.word_ids:
        labels.append(IGNORE_INDEX if word is None or word == previous else tags[word])
        previous = word
    return labels


def encode(tokenizer: Tokenizer, examples: list[Any], token_types: bool) -> EncodedSplit:
    """`token_types=False` (an encoder without segment embeddings) sends all-zero segment ids."""
    if examples and isinstance(examples[0], TaggedSentence):
        sentences: list[TaggedSentence] = examples
        encodings = tokenizer.encode_batch(
            [list(sentence.tokens) for sentence in sentences], is_pretokenized=True
        )
        labels: list[Any] = [
            first_subtoken_labels(encoding, sentence.tags)
            for encoding, sentence in zip(encodings, sentences, strict=True)
        ]
        gold: list[Any] = [list(sentence.tags) for sentence in sentences]
    else:
        texts: list[TextExample] = examples
        encodings = tokenizer.encode_batch(
            [
                example.text if example.pair is None else (example.text, example.pair)
                for example in texts
            ]
        )
        labels = gold = [example.label for example in texts]
    items = [
        {
            "input_ids": encoding.ids,
            "token_type_ids": encoding.type_ids if token_types else [0] * len(encoding.ids),
            "labels": label,
        }
        for encoding, label in zip(encodings, labels, strict=True)
    ]
    truncated = sum(1 for encoding in encodings if encoding.overflowing)
    return EncodedSplit(items, gold, truncated)


# The stand-in tokenizer's special token ids, by role (as flows/stages/tokenizer.py names them).
STAND_IN_SPECIAL = {"unk": 0, "cls": 1, "sep": 2, "mask": 3}


def stand_in_tokenizer(max_length: int) -> Tokenizer:
    """A tokenizer with BERT's special tokens and no vocabulary (every word is `[UNK]`), for the
    up-front check: the run's own tokenizer is trained by the first stage, so before it exists
    this one sends a task's rows through its kind's encoding (pairs, word lists, truncation, a
    prompt's template, a relation's markers, a question's windows)."""
    vocabulary = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, "[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 1), ("[SEP]", 2)],
    )
    tokenizer.enable_truncation(max_length)
    return tokenizer
