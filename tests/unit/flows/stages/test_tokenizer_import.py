"""A checkpoint's tokenizer is imported, not trained: the ids are those of `AutoTokenizer`.

Continued pretraining reads the checkpoint's embedding rows by id, so one id off is a silently
wrong model. Every tokenizer layout a public checkpoint ships is written offline and imported;
3,000 lines of accents, CJK, emoji, digits and over-long words must tokenize identically.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from flows.core.artifacts import ArtifactStore
from flows.corpora import Corpus, CorpusSettings, open_corpus
from flows.corpora.formats import CorpusInputError
from flows.stages.tokenizer import TOKENIZER_FILE, load_tokenizer
from flows.stages.tokenizer_import import import_tokenizer
from tests.checkpoint_tokenizers import TOKENIZER_FAMILIES, awkward_lines, write_tokenizer

EXPECTED_KIND = {
    "wordpiece": ("wordpiece", True),
    "wordpiece_cased": ("wordpiece", False),
    "bpe": ("bpe", False),
    "unigram": ("unigram", True),
    "tokenizer_json": ("bpe", False),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    path.write_text("\n\n".join(awkward_lines(300, seed=3)))
    return open_corpus(CorpusSettings(kind="files", paths=[str(path)]))


@pytest.mark.parametrize("family", TOKENIZER_FAMILIES)
def test_imported_ids_equal_auto_tokenizer(family: str, tmp_path: Path, corpus: Corpus) -> None:
    folder = tmp_path / family
    size = write_tokenizer(folder, family)
    ref = import_tokenizer(folder, corpus, ArtifactStore(tmp_path / "store"))
    ours = load_tokenizer(ref)
    theirs = AutoTokenizer.from_pretrained(str(folder))
    lines = awkward_lines()
    expected = theirs(lines)["input_ids"]
    got = [encoding.ids for encoding in ours.tokenizer.encode_batch(lines)]
    differing = [line for line, a, b in zip(lines, expected, got, strict=True) if a != b]
    assert not differing, f"{len(differing)} lines differ, first: {differing[0]!r}"
    assert (ours.settings.kind, ours.settings.lowercase) == EXPECTED_KIND[family]
    assert ours.vocab_size == size
    for role in ("pad", "unk", "cls", "sep", "mask"):
        token = getattr(theirs, f"{role}_token")
        assert getattr(ours.special, role) == theirs.convert_tokens_to_ids(token)


def test_fit_to_the_corpus_is_measured_each_run(tmp_path: Path, corpus: Corpus) -> None:
    folder = tmp_path / "bert"
    write_tokenizer(folder, "wordpiece")
    store = ArtifactStore(tmp_path / "store")
    first = import_tokenizer(folder, corpus, store)
    assert not first.cache_hit
    assert first.outputs["measured_documents"] > 200  # what cleaning keeps of 300 lines
    assert first.outputs["fertility"] > 1.0  # the awkward words split into several pieces
    other_text = tmp_path / "plain.txt"
    other_text.write_text("\n\n".join(["the protein binds a receptor in human cells"] * 50))
    second = import_tokenizer(
        folder, open_corpus(CorpusSettings(kind="files", paths=[str(other_text)])), store
    )
    assert second.cache_hit and second.key == first.key
    assert second.outputs["fertility"] < first.outputs["fertility"]


def test_the_artifact_is_keyed_by_the_files_content(tmp_path: Path, corpus: Corpus) -> None:
    store = ArtifactStore(tmp_path / "store")
    write_tokenizer(tmp_path / "a", "wordpiece")
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    first = import_tokenizer(tmp_path / "a", corpus, store)
    assert import_tokenizer(tmp_path / "copy", corpus, store).key == first.key
    vocab = tmp_path / "copy" / "vocab.txt"
    vocab.write_text(vocab.read_text() + "extraword\n")
    assert import_tokenizer(tmp_path / "copy", corpus, store).key != first.key


def test_truncation_and_padding_are_dropped(tmp_path: Path, corpus: Corpus) -> None:
    """Shards pack whole documents: a tokenizer.json saved with truncation at 8 must not cut
    them (or every document would silently lose all but 8 tokens)."""
    folder = tmp_path / "truncating"
    write_tokenizer(folder, "tokenizer_json")
    saved = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    saved.enable_truncation(8)
    saved.enable_padding(length=16)
    saved.save(str(folder / TOKENIZER_FILE))
    ours = load_tokenizer(import_tokenizer(folder, corpus, ArtifactStore(tmp_path / "store")))
    assert len(ours.tokenizer.encode(" ".join(["protein"] * 40)).ids) > 40


def test_a_folder_without_a_tokenizer_is_an_input_error(tmp_path: Path, corpus: Corpus) -> None:
    folder = tmp_path / "weights-only"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(CorpusInputError, match=r"weights-only holds no tokenizer: it needs"):
        import_tokenizer(folder, corpus, ArtifactStore(tmp_path / "store"))
    assert not list((tmp_path / "store").glob("tokenizer/[!.]*"))  # nothing published
