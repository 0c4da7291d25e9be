"""Word starts recomputed from token ids, for whole-word and span masking.

Shards store token ids only, not the word ids the tokenizer knew while encoding, so the masking
collators rebuild word boundaries from the ids. Each tokenizer family marks words in its own way,
and the rules here reproduce its pre-tokenizer's splits exactly for ASCII text. Everything is a
per-vocabulary table built once and gathered per batch: no Python loop over tokens.

Special tokens always start a word, and so does the token after one: documents are encoded
separately and joined by special tokens, so no word spans them. Known departures from the
tokenizer's own word ids: non-ASCII punctuation and whitespace in byte-level BPE (see
`ByteLevelWordBoundaries`), an [UNK] inside a Unigram word (it splits the word), and a whitespace
run cut by the end of a row (taken to end the text).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import torch
from tokenizers import Tokenizer

WORD_BOUNDARY_KINDS = ("wordpiece", "bpe", "unigram")

# A byte-level character is handled as a "lane": its byte (or a sentinel) in the low 9 bits and
# its regex class above, so that four of them pack into one int64 and classes need no lookup.
EDGE = 256  # a special token or the row's end: no word continues across it
NO_BYTE = 257  # the missing second byte of a one-byte token
# Regex classes, whitespace last; BREAK is whitespace other than " ", OUTSIDE a sentinel.
LETTER, NUMBER, OTHER, OUTSIDE, SPACE, BREAK = range(6)
CODE_BITS = 9
LANE_BITS = 12
CODE_MASK = (1 << CODE_BITS) - 1
LANE_MASK = (1 << LANE_BITS) - 1
BEHIND = 4  # bytes of look-behind a contraction needs (`'re` ending just before the token)
WINDOW_MASK = (1 << (LANE_BITS * BEHIND)) - 1
OPENS_CONTRACTION = torch.tensor([kind in (LETTER, NUMBER, BREAK) for kind in range(6)])


class WordBoundaries(Protocol):
    def word_starts(self, input_ids: torch.Tensor) -> torch.Tensor:
        """True where a token opens a word, same shape as `input_ids` (rows along the last dim).

        A row's first token, special tokens and the token after one always open a word.
        """
        ...


def shifted(ids: torch.Tensor, steps: int, fill: int) -> torch.Tensor:
    """The token `steps` places earlier (later if negative) in the row; `fill` past the edge."""
    width = min(abs(steps), ids.shape[-1])
    padding = torch.full((*ids.shape[:-1], width), fill, dtype=ids.dtype)
    if steps > 0:
        return torch.cat([padding, ids[..., : ids.shape[-1] - width]], dim=-1)
    return torch.cat([ids[..., width:], padding], dim=-1)


class PrefixWordBoundaries:
    """WordPiece and Unigram: whether a token opens a word is a property of the token alone.

    WordPiece writes every piece after a word's first with the `##` prefix; Metaspace (Unigram)
    turns each space into `▁` and splits before it, so a piece opens a word iff it starts with `▁`.
    """

    def __init__(self, opens_word: torch.Tensor, is_special: torch.Tensor) -> None:
        # One extra entry past the vocabulary stands for the row's edge, a special token.
        self.opens_word = torch.cat([opens_word | is_special, torch.tensor([True])])
        self.is_special = torch.cat([is_special, torch.tensor([True])])

    def word_starts(self, input_ids: torch.Tensor) -> torch.Tensor:
        previous = shifted(input_ids, 1, len(self.is_special) - 1)
        return torch.take(self.opens_word, input_ids) | torch.take(self.is_special, previous)


class ByteLevelWordBoundaries:
    r"""Byte-level BPE: replays the GPT-2 pre-tokenizer regex at each token boundary.

    `ByteLevel` splits text with `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
    \s+(?!\S)|\s+` and BPE never merges across those pieces, so a token opens a word iff a
    piece starts at its first byte. That depends on at most four bytes before it and one after
    (contractions, and a whitespace run leaving its last character to the next piece), which are
    gathered from per-token tables of first and last bytes. Bytes of 0x80 and above count as
    letters: exact for ASCII text, approximate for non-ASCII punctuation and whitespace.
    """

    def __init__(self, token_bytes: Sequence[bytes | None]) -> None:
        """`token_bytes[id]` is the token's text as bytes, or None for a special token."""
        lanes = [code | (byte_class(code) << CODE_BITS) for code in range(NO_BYTE + 1)]
        first, second, tail, tail_count = [], [], [], []
        for text in [*token_bytes, None]:  # the extra entry stands for the row's edge
            codes = [EDGE] * BEHIND if text is None else list(text)
            first.append(lanes[codes[0]])
            second.append(lanes[codes[1]] if len(codes) > 1 else lanes[NO_BYTE])
            last = codes[-BEHIND:]
            tail.append(
                sum(lanes[code] << (LANE_BITS * i) for i, code in enumerate(reversed(last)))
            )
            tail_count.append(len(last))
        self.first, self.second = torch.tensor(first), torch.tensor(second)
        self.tail, self.tail_count = torch.tensor(tail), torch.tensor(tail_count)
        self.no_byte = lanes[NO_BYTE]
        self.edge = len(token_bytes)  # the id standing for the row's edge
        self.contraction_letter = torch.zeros(CODE_MASK + 1, dtype=torch.bool)
        self.contraction_letter[list(b"stmd")] = True

    def word_starts(self, input_ids: torch.Tensor) -> torch.Tensor:
        second = torch.take(self.second, input_ids)
        next_first = torch.take(self.first, shifted(input_ids, -1, self.edge))
        after = torch.where(second == self.no_byte, next_first, second)
        window = self._bytes_behind(input_ids)
        behind = [(window >> (LANE_BITS * back)) & LANE_MASK for back in range(BEHIND)]
        return self._piece_starts(behind, torch.take(self.first, input_ids), after)

    def _bytes_behind(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The last four lanes before each token, the nearest in the lowest bits."""
        tails = torch.take(self.tail, input_ids)
        counts = torch.take(self.tail_count, input_ids)
        edge_tail = int(self.tail[self.edge])
        window = shifted(tails, BEHIND, edge_tail)
        for steps in range(BEHIND - 1, 0, -1):
            room = LANE_BITS * shifted(counts, steps, BEHIND)
            window = ((window << room) | shifted(tails, steps, edge_tail)) & WINDOW_MASK
        return window

    def _piece_starts(
        self, behind: Sequence[torch.Tensor], current: torch.Tensor, after: torch.Tensor
    ) -> torch.Tensor:
        """Whether a regex piece starts at `current`, given the 4 lanes before and 1 after."""
        back1, back2, back3, back4 = behind
        previous_kind, current_kind = back1 >> CODE_BITS, current >> CODE_BITS
        single = self.contraction_letter
        inside_contraction = contraction_opens(back2, back1) & (
            torch.take(single, current & CODE_MASK) | contraction_pair(current, after)
        )
        contraction_ended = (
            contraction_opens(back3, back2) & torch.take(single, back1 & CODE_MASK)
        ) | (contraction_opens(back4, back3) & contraction_pair(back2, back1))
        previous_space, current_space = previous_kind >= SPACE, current_kind >= SPACE
        # In a whitespace run the last character leaves for the next piece (`\s+(?!\S)`),
        # unless the run ends the text; a single space joins the text after it (` ?\p{L}+`).
        in_whitespace = torch.where(
            current_space, (after >> CODE_BITS) <= OTHER, previous_kind == BREAK
        )
        in_text = ((previous_kind != current_kind) & ~inside_contraction) | contraction_ended
        starts = torch.where(previous_space, in_whitespace, current_space | in_text)
        return starts | (previous_kind == OUTSIDE) | (current_kind == OUTSIDE)


def contraction_opens(before: torch.Tensor, apostrophe: torch.Tensor) -> torch.Tensor:
    r"""Whether a piece can start at this apostrophe lane, so that `'s` etc. may match there.

    Only after a letter, digit or non-space whitespace: a single space or punctuation joins the
    apostrophe into ` ?[^\s\p{L}\p{N}]+` instead.
    """
    fresh = torch.take(OPENS_CONTRACTION, before >> CODE_BITS)
    return fresh & ((apostrophe & CODE_MASK) == ord("'"))


def contraction_pair(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Whether two lanes hold `re`, `ve` or `ll` (the two-letter contraction endings)."""
    first, second = first & CODE_MASK, second & CODE_MASK
    r, v, e, l = (ord(letter) for letter in "rvel")  # noqa: E741
    return (((first == r) | (first == v)) & (second == e)) | ((first == l) & (second == l))


def byte_class(code: int) -> int:
    """The regex class of a byte code; bytes of 0x80 and above count as letters."""
    if code in (EDGE, NO_BYTE):
        return OUTSIDE
    character = chr(code)
    if character == " ":
        return SPACE
    if character in "\t\n\x0b\x0c\r":
        return BREAK
    if code >= 0x80 or character.isalpha():
        return LETTER
    return NUMBER if character.isdigit() else OTHER


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte (what `ByteLevel` writes), mapped to the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    stand_in = {byte: chr(byte) for byte in printable}
    for byte in range(256):
        if byte not in stand_in:
            stand_in[byte] = chr(256 + len(stand_in) - len(printable))
    return {character: byte for byte, character in stand_in.items()}


def word_boundaries(
    tokenizer: Tokenizer, kind: str, special_token_ids: Iterable[int]
) -> WordBoundaries:
    """Word-start tables for a trained tokenizer of `kind` (see `flows.stages.tokenizer_models`)."""
    if kind not in WORD_BOUNDARY_KINDS:
        raise ValueError(f"tokenizer.kind={kind!r} must be one of {WORD_BOUNDARY_KINDS}")
    tokens = vocabulary(tokenizer)
    special = set(special_token_ids)
    if kind == "bpe":
        alphabet = byte_level_alphabet()
        return ByteLevelWordBoundaries(
            [
                None if i in special else bytes(alphabet[c] for c in token)
                for i, token in enumerate(tokens)
            ]
        )
    is_special = torch.zeros(len(tokens), dtype=torch.bool)
    is_special[sorted(special)] = True
    if kind == "wordpiece":
        prefix = tokenizer.model.continuing_subword_prefix
        opens = [not token.startswith(prefix) for token in tokens]
    else:
        marker = tokenizer.pre_tokenizer.replacement
        opens = [token.startswith(marker) for token in tokens]
    return PrefixWordBoundaries(torch.tensor(opens), is_special)


def vocabulary(tokenizer: Tokenizer) -> list[str]:
    """Token text by id; every id below the vocabulary size must have one."""
    by_id = {index: token for token, index in tokenizer.get_vocab(with_added_tokens=True).items()}
    missing = [index for index in range(len(by_id)) if index not in by_id]
    if missing:
        raise ValueError(f"the tokenizer's vocabulary has no token for ids {missing[:5]}")
    return [by_id[index] for index in range(len(by_id))]
