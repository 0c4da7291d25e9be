"""`tokenizer.extend_vocabulary=N`: the corpus words a checkpoint's tokenizer shreds become tokens
of their own, starting at the mean of their pieces' embeddings; nothing else moves."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from flows.core.artifacts import ArtifactStore
from flows.corpora import Corpus, CorpusSettings, open_corpus
from flows.stages.public_import import import_checkpoint
from flows.stages.tokenizer import load_tokenizer
from flows.stages.tokenizer_import import import_tokenizer, read_extension
from lightning_modules.models.serialization import load_masked_lm
from tests.checkpoint_tokenizers import write_tokenizer
from tests.checkpoints import tiny_checkpoint

DOMAIN_WORDS = ["bronchiectasis", "carcinoma", "hematuria"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """Sentences of the tokenizer's own words where three long domain words recur, the most
    frequent first (numbered: identical documents are deduplicated)."""
    lines = [
        f"{index} the protein binds {DOMAIN_WORDS[0]} in human cells and "
        f"{DOMAIN_WORDS[1 if index % 3 else 2]} cause"
        for index in range(200)
    ]
    path = tmp_path_factory.mktemp("domain") / "text.txt"
    path.write_text("\n\n".join(lines))
    return open_corpus(CorpusSettings(kind="files", paths=[str(path)], validation_fraction=0.2))


@pytest.mark.parametrize("family", ["wordpiece", "bpe"])
def test_the_most_split_frequent_words_become_single_tokens(
    family: str, tmp_path: Path, corpus: Corpus
) -> None:
    folder = tmp_path / family
    write_tokenizer(folder, family)
    store = ArtifactStore(tmp_path / "store")
    plain = import_tokenizer(folder, corpus, store)
    extended = import_tokenizer(folder, corpus, store, extend_vocabulary=2)
    assert extended.key != plain.key
    added = read_extension(extended)
    assert [entry["word"] for entry in added] == DOMAIN_WORDS[:2]  # by frequency
    assert all(len(entry["pieces"]) >= 3 for entry in added)
    before, after = load_tokenizer(plain).tokenizer, load_tokenizer(extended).tokenizer
    sentence = f"the protein binds {DOMAIN_WORDS[0]} in human cells"
    ids = after.encode(sentence, add_special_tokens=False).ids
    expected = before.encode(sentence, add_special_tokens=False).ids
    assert added[0]["id"] in ids  # one token for the word, none for the space before it
    assert len(ids) == len(expected) - len(added[0]["pieces"]) + 1
    assert added[0]["id"] >= before.get_vocab_size()  # appended: no existing id moves
    other = "the protein binds a receptor in human cells"
    assert before.encode(other).ids == after.encode(other).ids
    assert extended.outputs["added_words"] == 2
    assert extended.outputs["fertility"] < extended.outputs["fertility_before_extension"]


def test_new_rows_start_at_the_mean_of_their_pieces(tmp_path: Path, corpus: Corpus) -> None:
    folder = tmp_path / "bert"
    size = write_tokenizer(folder, "wordpiece")
    tiny_checkpoint("bert", folder, vocab_size=size, scale=0.5)
    store = ArtifactStore(tmp_path / "store")
    plain_tokenizer = import_tokenizer(folder, corpus, store)
    extended_tokenizer = import_tokenizer(folder, corpus, store, extend_vocabulary=3)
    plain = load_masked_lm(import_checkpoint(folder, plain_tokenizer, store).path)
    extended = load_masked_lm(import_checkpoint(folder, extended_tokenizer, store).path)
    assert extended.config.vocab_size == size + 3
    old, new = plain.encoder.embeddings.word.weight, extended.encoder.embeddings.word.weight
    assert torch.equal(new[:size], old)
    for entry in read_extension(extended_tokenizer):
        assert torch.allclose(new[entry["id"]], old[entry["pieces"]].mean(0))
        bias = plain.head.bias.detach()[entry["pieces"]].mean()
        assert float(extended.head.bias[entry["id"]]) == pytest.approx(float(bias))
