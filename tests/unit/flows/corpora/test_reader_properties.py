"""Property-based check of the corpus readers over generated documents: JSON lines and plain text
return every cleaned document, deduplicated, in order."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from flows.corpora import CorpusSettings, open_corpus
from flows.corpora.cleaning import clean_text

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
