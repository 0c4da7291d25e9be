"""The tokenizer stage across processes: WordPiece and BPE build byte-identical artifacts under
one key; Unigram may not, so its key is its content and never names two different builds.

`tokenizers` seeds its hash maps per process, so only two processes show the difference: on
this corpus, WordPiece as `tokenizers` trains it differed in every one of three processes, and
Unigram differs even between two trainings in one process.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from flows.core.artifacts import ArtifactStore
from flows.corpora import CorpusSettings, open_corpus
from flows.stages.tokenizer import TokenizerSettings, load_tokenizer, train_tokenizer

KINDS = ("wordpiece", "bpe", "unigram")
WORKER = """
import hashlib, json, sys
from pathlib import Path
from flows.core.artifacts import ArtifactStore
from flows.corpora import CorpusSettings, open_corpus
from flows.stages.tokenizer import TOKENIZER_FILE, TokenizerSettings, train_tokenizer

corpus_file, store_root = sys.argv[1:3]
store, built = ArtifactStore(Path(store_root)), {}
for kind in ("wordpiece", "bpe", "unigram"):
    corpus = open_corpus(CorpusSettings(kind="files", paths=[corpus_file]))
    ref = train_tokenizer(TokenizerSettings(kind=kind, vocab_size=300), corpus, store)
    built[kind] = [ref.key, hashlib.sha256((ref.path / TOKENIZER_FILE).read_bytes()).hexdigest()]
print(json.dumps(built))
"""


@pytest.fixture(scope="module")
def syllable_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """800 documents of made-up words with Zipf-like frequencies: many ties among merges."""
    rng = random.Random(7)
    syllables = [a + b for a in "kmntrs" for b in "aeiou"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(600)]
    weights = [1 / rank for rank in range(1, len(words) + 1)]
    documents = [" ".join(rng.choices(words, weights, k=40)) for _ in range(800)]
    path = tmp_path_factory.mktemp("corpus") / "syllables.txt"
    path.write_text("\n\n".join(documents))
    return path


def build_in_a_new_process(corpus: Path, store: Path) -> dict[str, tuple[str, str]]:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(corpus), str(store)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {kind: tuple(built) for kind, built in json.loads(done.stdout).items()}


def test_two_processes_build_the_same_wordpiece_and_bpe_and_key_unigram_by_content(
    syllable_corpus: Path, tmp_path: Path
) -> None:
    first = build_in_a_new_process(syllable_corpus, tmp_path / "machine-a")
    second = build_in_a_new_process(syllable_corpus, tmp_path / "machine-b")
    for kind in ("wordpiece", "bpe"):
        assert first[kind] == second[kind], f"{kind} differs between two processes"
    (key_a, bytes_a), (key_b, bytes_b) = first["unigram"], second["unigram"]
    assert (key_a == key_b) == (bytes_a == bytes_b)
    assert len({built[0] for built in first.values()}) == len(KINDS)


def test_declared_continuation_symbols_stay_ordinary_vocabulary(
    syllable_corpus: Path, tmp_path: Path
) -> None:
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(syllable_corpus)]))
    ref = train_tokenizer(TokenizerSettings(vocab_size=300), corpus, ArtifactStore(tmp_path))
    tokenizer = load_tokenizer(ref).tokenizer
    added = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
    assert added == {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    assert "##k" in tokenizer.get_vocab()
    literal = tokenizer.encode("##k", add_special_tokens=False).tokens
    assert len(literal) == 3 and literal[-1] == "k"  # "#", "#", "k": not one added token
