"""Text cleaning and document identity: the per-document rules every corpus source shares."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Literal, cast

NORMALIZATIONS = ("NFC", "NFKC", "NFD", "NFKD", "none")
NormalForm = Literal["NFC", "NFD", "NFKC", "NFKD"]
_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
# Every character that is a control character or whitespace other than " " and "\n".
_RARE_CHARACTERS = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
)
_SPACE_RUNS = re.compile(" {2,}")
_LINE_EDGES = re.compile(" *\n[ \n]*")


def clean_text(text: str, normalization: str = "NFC") -> str:
    """Unicode normal form, no control characters, single spaces, no blank lines.

    Cheap and lossless for MLM; NFKC (compatibility forms, as ALBERT's SentencePiece does) is
    a config choice because it folds characters some domains need to keep apart.
    """
    return clean_and_count_words(text, normalization)[0]


def clean_and_count_words(text: str, normalization: str) -> tuple[str, int]:
    """`clean_text` and the number of whitespace-separated words, in one pass where possible.

    Most text holds no tab, control or exotic space: for it, cleaning needs only C-speed
    substring checks, and the word count is a count of separators. Anything else takes the
    general line-by-line path, which gives the same result on the text the fast path accepts.
    """
    if normalization != "none" and not text.isascii():
        text = unicodedata.normalize(cast(NormalForm, normalization), text)
    if _RARE_CHARACTERS.search(text) is not None:
        text = _CONTROL.sub("", text)
        lines = (_SPACES.sub(" ", line).strip() for line in text.splitlines())
        text = "\n".join(line for line in lines if line)
        return text, len(text.split())
    if "  " in text:
        text = _SPACE_RUNS.sub(" ", text)
    if " \n" in text or "\n " in text or "\n\n" in text:
        text = _LINE_EDGES.sub("\n", text)
    text = text.strip(" \n")
    return text, text.count(" ") + text.count("\n") + 1 if text else 0


def document_identity(text: str, validation_fraction: float) -> tuple[int, bool]:
    """A document's dedupe key and its split, from one hash of its case-folded text.

    The split is a pure function of the text, so it is stable across runs and orders, and the
    tokenizer and shards stages agree on it without coordinating; copies that differ only in
    case share a key and a split. 64 bits: a key collision needs ~4e9 distinct documents.
    """
    digest = hashlib.blake2b(text.lower().encode("utf-8"), digest_size=16).digest()
    validation = int.from_bytes(digest[8:], "big") / 2**64 < validation_fraction
    return int.from_bytes(digest[:8], "big"), validation
