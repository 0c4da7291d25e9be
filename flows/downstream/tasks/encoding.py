"""Examples to token ids, and the scores of predictions against a split's gold labels.

Tagging follows BERT's NER recipe: a word's tag goes on its first sub-token, the other
sub-tokens get -100 (ignored by the loss). Scores are computed per word on the *whole* sentence,
so words cut off by `max_length` count as predicted `O`: truncation costs recall, visibly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tokenizers import Encoding, Tokenizer, models, pre_tokenizers, processors

from flows.downstream.tasks.readers import TaggedSentence, TextExample
from lightning_modules.label_metrics import entity_scores, relation_scores
from lightning_modules.metrics import accuracy, binary_f1, macro_f1, matthews_corrcoef
from lightning_modules.models.config import IGNORE_INDEX

if TYPE_CHECKING:  # Lightning: not imported while a config is only being validated
    from lightning_modules.classifier import Predictions

Item = dict[str, Any]


class EncodedSplit(torch.utils.data.Dataset[Item]):
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


def stand_in_tokenizer(max_length: int) -> Tokenizer:
    """A tokenizer with BERT's special tokens and no vocabulary (every word is `[UNK]`), for the
    up-front check: the run's own tokenizer is trained by the first stage, so before it exists
    this one sends a task's rows through `encode` (pairs, word lists, truncation)."""
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "[CLS]": 1, "[SEP]": 2}, "[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 1), ("[SEP]", 2)],
    )
    tokenizer.enable_truncation(max_length)
    return tokenizer


def pad_batch(items: list[Item], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(item["input_ids"]) for item in items)
    input_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    token_type_ids = torch.zeros((len(items), width), dtype=torch.long)
    tagged = isinstance(items[0]["labels"], list)
    labels = (
        torch.full((len(items), width), IGNORE_INDEX, dtype=torch.long)
        if tagged
        else torch.tensor([item["labels"] for item in items])
    )
    attention_mask = torch.zeros((len(items), width), dtype=torch.bool)
    for row, item in enumerate(items):
        length = len(item["input_ids"])
        input_ids[row, :length] = torch.tensor(item["input_ids"])
        token_type_ids[row, :length] = torch.tensor(item["token_type_ids"])
        attention_mask[row, :length] = True
        if tagged:
            labels[row, :length] = torch.tensor(item["labels"])
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": token_type_ids,
        "labels": labels,
    }


def score(
    kind: str,
    gold: list[Any],
    predictions: Predictions,
    labels: list[str],
    negative: str | None = None,
) -> dict[str, float]:
    """Every metric of the task's kind; the recipe picks the configured one for selection. A
    relation task's F1s leave out its `negative` label ("no relation")."""
    if kind == "token_classification":
        predicted_tags = [
            [labels[tag] for tag in predicted] + ["O"] * (len(truth) - len(predicted))
            for truth, predicted in zip(gold, predictions, strict=True)
        ]
        gold_tags = [[labels[tag] for tag in truth] for truth in gold]
        return entity_scores(gold_tags, predicted_tags)
    predicted, truth = torch.tensor(predictions), torch.tensor(gold)
    if kind == "relation":
        names = [labels[label] for label in gold], [labels[label] for label in predictions]
        return {"accuracy": accuracy(predicted, truth), **relation_scores(*names, negative)}
    scores = {
        "accuracy": accuracy(predicted, truth),
        "macro_f1": macro_f1(predicted, truth, len(labels)),
        "mcc": matthews_corrcoef(predicted, truth, len(labels)),
    }
    if len(labels) == 2:
        scores["f1"] = binary_f1(predicted, truth, positive=1)
    return scores
