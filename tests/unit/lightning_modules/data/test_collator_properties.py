"""Property-based checks of the readers and the collators over generated inputs."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.corpora import CorpusSettings, open_corpus
from flows.corpora.cleaning import clean_text
from lightning_modules.data.collator import MaskingCollator, MaskingRule
from lightning_modules.data.span_masking import SpanMaskingCollator, WholeWordMaskingCollator
from lightning_modules.data.word_boundaries import PrefixWordBoundaries
from lightning_modules.models.heads import IGNORE_INDEX

WORD = st.text(
    # U+FEFF opening a file is its byte-order mark, which the readers drop (test_input_faults.py)
    alphabet=st.characters(
        codec="utf-8",
        exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp"),
        exclude_characters="\ufeff",
    ),
    min_size=1,
    max_size=8,
)
DOCUMENT = st.lists(WORD, min_size=5, max_size=30).map(" ".join)
SPECIAL = [0, 1, 2, 3, 4]
VOCAB = 60


@settings(max_examples=40, deadline=None)
@given(st.lists(DOCUMENT, min_size=1, max_size=8))
def test_jsonl_and_text_readers_return_every_cleaned_document_in_order(
    documents: list[str],
) -> None:
    folded: dict[str, str] = {}  # first copy of each case-folded text, as the dedupe keeps
    for text in (clean_text(document) for document in documents):
        if len(text.split()) >= 5:
            folded.setdefault(text.lower(), text)
    expected = list(folded.values())
    with tempfile.TemporaryDirectory() as scratch:
        jsonl = Path(scratch) / "a.jsonl"
        jsonl.write_text("\n".join(json.dumps({"text": text}) for text in documents))
        text_file = Path(scratch) / "b.txt"
        text_file.write_text("\n\n".join(documents) + "\n")
        for path in (jsonl, text_file):
            corpus = open_corpus(CorpusSettings(kind="files", paths=[str(path)]))
            assert list(corpus.documents()) == expected


def collators(rate: float, seed: int) -> list[MaskingCollator]:
    rule = MaskingRule(mask_rate=rate)
    opens = torch.arange(VOCAB) % 3 != 1  # ids 1, 4, 7, ... continue a word
    is_special = torch.zeros(VOCAB, dtype=torch.bool)
    is_special[SPECIAL] = True
    boundaries = PrefixWordBoundaries(opens, is_special)
    common = (rule, VOCAB, 4, SPECIAL, seed)
    return [
        MaskingCollator(*common),
        WholeWordMaskingCollator(*common, boundaries),
        SpanMaskingCollator(*common, boundaries),
    ]


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 6),
    width=st.integers(4, 40),
    rate=st.floats(0.05, 0.6),
    seed=st.integers(0, 2**16),
)
def test_every_collator_changes_only_selected_non_special_tokens(
    rows: int, width: int, rate: float, seed: int
) -> None:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (rows, width), generator=generator)
    special = torch.isin(ids, torch.tensor(SPECIAL))
    for collator in collators(rate, seed):
        batch = collator.mask(ids.clone(), torch.Generator().manual_seed(seed))
        selected = batch["labels"] != IGNORE_INDEX
        assert not (selected & special).any()
        assert torch.equal(batch["labels"][selected], ids[selected])
        assert torch.equal(batch["input_ids"][~selected], ids[~selected])
        replaced = batch["input_ids"][selected]
        assert not torch.isin(replaced, torch.tensor([0, 1, 2, 3])).any()
