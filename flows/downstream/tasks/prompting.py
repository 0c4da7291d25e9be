"""A classification task as a cloze: the template, its label words, and the token ids of both.

`finetune.prompt` (or a catalog entry's `recipe.prompt`) asks for prompt-based fine-tuning
(lightning_modules/models/prompt_head.py): each example becomes the template with `{text}` (and
`{pair}`) filled in and `{mask}` the tokenizer's mask token, and each label is scored by the MLM
head's logit for its word. Only the text is ever cut to fit `max_length`, so the [MASK] is never
truncated away.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import field_validator
from pydantic_core import PydanticCustomError
from tokenizers import Tokenizer

from flows.core.settings import ConfigError, Settings
from flows.downstream.tasks.encoding import EncodedSplit
from flows.downstream.tasks.readers import TextExample

SLOTS = ("{text}", "{pair}", "{mask}")
SLOT = re.compile(r"(\{text\}|\{pair\}|\{mask\})")


class PromptSettings(Settings):
    """`template` holds `{text}` and `{mask}` once each, and `{pair}` once for a sentence-pair
    task; `verbalizer` maps every label of the task to one word of the vocabulary."""

    section = "finetune.prompt"
    template: str
    verbalizer: dict[str, str]

    @field_validator("template")
    @classmethod
    def _slots_once(cls, template: str) -> str:
        for slot in ("{text}", "{mask}"):
            if template.count(slot) != 1:
                raise PydanticCustomError(
                    "prompt_template",
                    "must hold {slot} exactly once (e.g. '{text} It was {mask} .')",
                    {"slot": slot},
                )
        if template.count("{pair}") > 1:
            raise PydanticCustomError("prompt_template", "must hold {pair} at most once")
        return template

    @field_validator("verbalizer", mode="before")
    @classmethod
    def _labels_as_text(cls, verbalizer: Any) -> Any:
        """Labels are strings; a command line's `{0: bad, 1: good}` gives integer keys."""
        if isinstance(verbalizer, Mapping):
            return {
                str(label)
                if isinstance(label, int) and not isinstance(label, bool)
                else label: word
                for label, word in verbalizer.items()
            }
        return verbalizer

    @field_validator("verbalizer")
    @classmethod
    def _distinct_words(cls, verbalizer: dict[str, str]) -> dict[str, str]:
        words = list(verbalizer.values())
        if len(words) < 2 or len(set(words)) != len(words) or not all(w.strip() for w in words):
            raise PydanticCustomError(
                "prompt_verbalizer",
                "must map each label to its own non-empty word, at least two labels "
                "(e.g. {'0': terrible, '1': great})",
            )
        return verbalizer


@dataclass(frozen=True)
class PromptIds:
    """What the prompt head needs: the mask token's id and each label's word id, label order."""

    mask: int
    labels: list[int]


def label_word_ids(
    tokenizer: Tokenizer, prompt: PromptSettings, labels: list[str], key: str
) -> list[int]:
    """Each label's word as one token id; a label without a word, a word for no label, or a word
    the vocabulary splits into pieces is a ConfigError naming `key` (the prompt's config key)."""
    missing = [label for label in labels if label not in prompt.verbalizer]
    extra = sorted(set(prompt.verbalizer) - set(labels))
    if missing or extra:
        raise ConfigError(
            f"{key}.verbalizer must name every label of the task and no other: labels {labels}"
            + (f", missing {missing}" if missing else "")
            + (f", not labels {extra}" if extra else "")
        )
    ids = []
    for label in labels:
        word = prompt.verbalizer[label]
        pieces = tokenizer.encode(word, add_special_tokens=False)
        if len(pieces.ids) != 1:
            raise ConfigError(
                f"{key}.verbalizer: the word {word!r} for label {label!r} is "
                f"{len(pieces.ids)} tokens {pieces.tokens} in this vocabulary; a label's word "
                "must be one token (pick a more frequent word)"
            )
        ids.append(pieces.ids[0])
    return ids


def encode_prompted(
    tokenizer: Tokenizer,
    examples: list[TextExample],
    template: str,
    special: dict[str, int],
    max_length: int,
    key: str,
) -> EncodedSplit:
    """`[CLS] <template, slots filled> [SEP]`, segment ids all 0. Texts are cut, longest first,
    until the row fits `max_length`; a mask token inside a text is read as [UNK], so each row has
    exactly the template's one [MASK]. `special` holds the ids of cls, sep, mask and unk; `key`,
    the prompt's config key, is named by the error a template without the task's pair slot, or
    with a pair slot the task lacks, raises."""
    parts = [part for part in SLOT.split(template) if part]
    has_pair = "{pair}" in parts
    literal = {
        part: tokenizer.encode(part, add_special_tokens=False).ids
        for part in parts
        if part not in SLOTS
    }
    fixed = 2 + sum(1 if part == "{mask}" else len(literal.get(part, [])) for part in parts)
    room = max_length - fixed
    if room < 1:
        raise ConfigError(
            f"{key}.template={template!r} takes {fixed} of the {max_length} tokens of max_length "
            "with [CLS] and [SEP], leaving no room for the text; shorten it or raise max_length"
        )
    items, truncated = [], 0
    for example in examples:
        if (example.pair is not None) != has_pair:
            raise ConfigError(
                f"{key}.template={template!r} "
                + (
                    "has {pair}, but the task's examples are single sentences; remove it"
                    if has_pair
                    else "lacks {pair}, but the task's examples are sentence pairs; place it"
                )
            )
        texts = {"{text}": text_ids(tokenizer, example.text, special)}
        if example.pair is not None:
            texts["{pair}"] = text_ids(tokenizer, example.pair, special)
        cut = False
        while sum(len(ids) for ids in texts.values()) > room:
            longest = max(texts, key=lambda slot: len(texts[slot]))
            texts[longest] = texts[longest][:-1]
            cut = True
        truncated += cut
        ids = [special["cls"]]
        for part in parts:
            ids += [special["mask"]] if part == "{mask}" else texts.get(part, literal.get(part, []))
        ids.append(special["sep"])
        items.append({"input_ids": ids, "token_type_ids": [0] * len(ids), "labels": example.label})
    return EncodedSplit(items, [example.label for example in examples], truncated)


def text_ids(tokenizer: Tokenizer, text: str, special: dict[str, int]) -> list[int]:
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return [special["unk"] if token == special["mask"] else token for token in ids]
