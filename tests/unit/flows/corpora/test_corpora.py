from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.core.settings import ConfigError
from flows.corpora import CorpusSettings, open_corpus
from flows.corpora.cleaning import clean_and_count_words, clean_text
from flows.corpora.formats import CorpusInputError
from flows.corpora.pydoc_topics_task import LABELS, load_pydoc_topics, module_splits
from flows.corpora.stdlib_docs import stdlib_docstrings

PARAGRAPHS = [
    "The quick brown fox jumps over the lazy dog today.",
    "A second paragraph talks about something else entirely, at length.",
    "Short one.",
]


def files_corpus(*paths: Path, **overrides) -> list[str]:
    settings = CorpusSettings(kind="files", paths=[str(p) for p in paths], **overrides)
    return list(open_corpus(settings).documents())


def test_text_files_split_into_paragraphs_and_short_ones_are_dropped(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("\n\n".join(PARAGRAPHS) + "\n")
    assert files_corpus(tmp_path / "a.txt") == PARAGRAPHS[:2]


def test_jsonl_reads_the_configured_field_and_dedupes_exact_copies(tmp_path: Path) -> None:
    lines = [{"body": PARAGRAPHS[0]}, {"body": PARAGRAPHS[1]}, {"body": PARAGRAPHS[0].upper()}]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    settings = CorpusSettings(kind="files", paths=[str(tmp_path / "a.jsonl")], text_field="body")
    corpus = open_corpus(settings)
    assert list(corpus.documents()) == PARAGRAPHS[:2]
    assert corpus.stats.dropped_duplicate == 1


def test_directories_and_globs_are_expanded_in_sorted_order(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_text(PARAGRAPHS[1])
    (tmp_path / "a.txt").write_text(PARAGRAPHS[0])
    assert files_corpus(tmp_path) == PARAGRAPHS[:2]
    assert files_corpus(Path(f"{tmp_path}/*.txt")) == PARAGRAPHS[:2]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "latin1.txt",
            "caf\xe9 au lait is a drink with milk in it".encode("latin-1"),
            r"latin1.txt:1 is not valid UTF-8 .*corpus.decode_errors=replace\|skip",
        ),
        ("rows.jsonl", b'{"content": "no text field here"}\n', r"rows.jsonl:1 has no field 'text'"),
        ("rows2.jsonl", b'{"text": broken\n', r"rows2.jsonl:1 is not valid JSON"),
    ],
)
def test_bad_files_fail_with_the_file_and_line(
    tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(CorpusInputError, match=message):
        files_corpus(tmp_path / name)


def test_decode_policies_replace_and_skip_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"good line with enough words in it here\n\nbad \xff line with enough words\n")
    replacing = open_corpus(
        CorpusSettings(kind="files", paths=[str(path)], decode_errors="replace")
    )
    assert list(replacing.documents())[1] == "bad \ufffd line with enough words"
    assert replacing.stats.undecodable_lines_replaced == 1
    skipping = open_corpus(CorpusSettings(kind="files", paths=[str(path)], decode_errors="skip"))
    assert list(skipping.documents()) == ["good line with enough words in it here"]
    assert skipping.stats.undecodable_lines_skipped == 1


def test_binary_files_are_skipped_and_counted(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text(PARAGRAPHS[0])
    (tmp_path / "blob.txt").write_bytes(b"\x00\x01\x02binary")
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(tmp_path)]))
    assert list(corpus.documents()) == PARAGRAPHS[:1]
    assert corpus.stats.binary_files_skipped == 1


def test_a_100_mb_line_is_dropped_in_bounded_memory(tmp_path: Path) -> None:
    import resource

    path = tmp_path / "huge.txt"
    with path.open("w") as handle:
        handle.write(PARAGRAPHS[0] + "\n\n")
        for _ in range(100):
            handle.write("word " * 200_000)  # 1 MB per write, no newline: one 100 MB line
        handle.write("\n\n" + PARAGRAPHS[1] + "\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(path)], max_chars=100_000))
    assert list(corpus.documents()) == PARAGRAPHS[:2]
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert corpus.stats.dropped_long == 1
    assert grown_mb < 20, f"reading a 100 MB line grew peak RSS by {grown_mb:.0f} MB"


def test_documents_over_max_chars_are_dropped_from_any_format(tmp_path: Path) -> None:
    lines = [{"text": PARAGRAPHS[0]}, {"text": "long " * 100}]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    corpus = open_corpus(
        CorpusSettings(kind="files", paths=[str(tmp_path / "a.jsonl")], max_chars=100)
    )
    assert list(corpus.documents()) == PARAGRAPHS[:1]
    assert corpus.stats.dropped_long == 1


@pytest.mark.parametrize(
    ("normalization", "expected"),
    [("NFC", "ﬁne café ①"), ("NFKC", "fine café 1"), ("none", "ﬁne cafe\u0301 ①")],
)
def test_unicode_normalization_is_configurable(normalization: str, expected: str) -> None:
    assert clean_text("ﬁne cafe\u0301 ①", normalization) == expected


def test_a_tokenizer_sample_cap_reads_a_share_of_every_file(tmp_path: Path) -> None:
    for name in "ab":
        docs = [f"file {name} document {i} with a few more words" for i in range(100)]
        (tmp_path / f"{name}.txt").write_text("\n\n".join(docs))
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(tmp_path)]))
    heldout: list[str] = []
    sample = list(corpus.training_documents(heldout, keep=0, max_chars=800))
    from_a = [text for text in sample if text.startswith("file a")]
    assert 5 <= len(from_a) <= 12 and 5 <= len(sample) - len(from_a) <= 12


def test_missing_paths_and_empty_globs_are_named(tmp_path: Path) -> None:
    with pytest.raises(CorpusInputError, match=r"nowhere\.txt does not exist"):
        files_corpus(tmp_path / "nowhere.txt")
    with pytest.raises(CorpusInputError, match=r"the glob .*\*.md' matches no file"):
        files_corpus(Path(f"{tmp_path}/*.md"))


def test_files_kind_without_paths_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"corpus\.kind=files needs corpus\.paths"):
        CorpusSettings(kind="files")


def test_validation_split_is_stable_and_disjoint(tmp_path: Path) -> None:
    texts = [f"document number {i} has several words of text" for i in range(400)]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in texts))
    corpus = open_corpus(
        CorpusSettings(kind="files", paths=[str(tmp_path / "a.jsonl")], validation_fraction=0.1)
    )
    validation: list[str] = []
    train = list(corpus.training_documents(validation, keep=1000))
    assert sorted(train + validation) == sorted(texts)
    assert 20 <= len(validation) <= 60
    again: list[str] = []
    assert train == list(corpus.training_documents(again, keep=1000)) and again == validation
    capped: list[str] = []
    list(corpus.training_documents(capped, keep=5))
    assert capped == validation[:5]


def test_a_save_to_disk_dataset_is_read_as_a_corpus(tmp_path: Path) -> None:
    import datasets

    datasets.Dataset.from_dict({"body": PARAGRAPHS}).save_to_disk(str(tmp_path / "ds"))
    settings = CorpusSettings(kind="huggingface", name=str(tmp_path / "ds"), text_field="body")
    assert list(open_corpus(settings).documents()) == PARAGRAPHS[:2]


def test_pydoc_topics_has_every_label_on_every_side_and_no_module_on_two_sides() -> None:
    data = load_pydoc_topics(min_words=5, max_train_examples=None, seed=0)
    for split, examples in data.splits.items():
        assert {example.label for example in examples} == set(range(len(LABELS))), split
    assert len(data.splits["train"]) > len(data.splits["test"]) > len(data.splits["validation"])
    assert set(module_splits().values()) == {"train", "validation", "test"}
    # each example's text back to the module it was read from (the loader keeps the first)
    module_of: dict[str, str] = {}
    for docstring in stdlib_docstrings():
        module_of.setdefault(docstring.text, docstring.module)
    sides = {
        split: {module_of[example.text] for example in examples}
        for split, examples in data.splits.items()
    }
    assert not sides["train"] & sides["validation"]
    assert not sides["train"] & sides["test"]
    assert not sides["validation"] & sides["test"]


def test_pydoc_corpus_leaves_out_the_downstream_test_text() -> None:
    test_texts = {example.text for example in load_pydoc_topics(5, None, 0).splits["test"]}
    corpus = open_corpus(CorpusSettings(kind="pydoc", min_words=1))
    seen = set(corpus.documents())
    assert len(seen) > 3000
    assert not {clean_text(text) for text in test_texts} & seen


def reference_clean(text: str) -> str:
    """The general path alone: control characters out, each line's spaces collapsed."""
    text = re.sub(r"[\x00-\x08\x0b\x0e-\x1f\x7f]", "", unicodedata.normalize("NFC", text))
    lines = (re.sub(r"[ \t\f\v\u00a0]+", " ", line).strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line)


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab é\n\t\r\f\v\x00\x85\xa0\u2028\u3000")), max_size=40)
)
def test_the_fast_cleaning_path_equals_the_general_one(text: str) -> None:
    cleaned, words = clean_and_count_words(text, "NFC")
    assert cleaned == reference_clean(text)
    assert words == len(cleaned.split())
