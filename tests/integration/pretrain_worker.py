"""The pretrain stage in a process of its own, so a test can SIGKILL it mid-run."""

from __future__ import annotations

import sys
from pathlib import Path

from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.corpora import Corpus, CorpusSettings, open_corpus
from flows.stages.init_point import InitPoint, shape_keys
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import pretrain
from flows.stages.public_import import import_checkpoint
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, train_tokenizer
from flows.stages.tokenizer_import import import_tokenizer
from flows.stages.training_types import PretrainSettings
from flows.training.settings import TrainerSettings
from lightning_modules.transformers_import import peek_checkpoint
from tests.checkpoint_tokenizers import write_tokenizer
from tests.checkpoints import tiny_checkpoint

MODEL = {
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
}
# ModernBERT's options on the same small shape: rotary, GeGLU, local layers, document masks.
MODERN_MODEL = {
    **MODEL,
    "num_layers": 3,
    "norm_placement": "pre",
    "position_embedding": "rotary",
    "feed_forward": "geglu",
    "linear_bias": False,
    "norm_bias": False,
    "first_attention_norm": False,
    "type_vocab_size": 0,
    "global_attention_every": 2,
    "local_attention": 8,
    "document_attention": True,
}
MODELS = {"bert": MODEL, "modernbert": MODERN_MODEL}
# Continuing a transformers checkpoint: its folder is written once, beside the stores (a
# WordPiece vocabulary trained in two processes may differ, so both stores read one copy).
CHECKPOINT = "checkpoint"
# fp32: the exactness checks built on this (resume, two ranks against one) compare to 1e-4 and
# 1e-6, which bf16's rounding (the default recipe) does not hold across a different reduction.
TRAINER = TrainerSettings(
    precision="32-true",
    max_steps=90,
    batch_size=8,
    warmup_steps=5,
    val_every_steps=30,
    max_validation_sequences=16,
    checkpoint_every_steps=15,
    log_every_steps=15,
)


def run(store_root: Path, corpus_file: Path, model: str = "bert") -> ArtifactRef:
    store = ArtifactStore(store_root)
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(corpus_file)]))
    if model == CHECKPOINT:
        return continue_checkpoint(store, corpus, store_root.parent / "checkpoint")
    tokenizer = train_tokenizer(TokenizerSettings(vocab_size=200), corpus, store)
    shards = build_shards(ShardSettings(seq_len=32), corpus, tokenizer, store)
    settings = PretrainSettings(MODELS[model], ObjectiveSettings(), TRAINER, seed=3)
    return pretrain(settings, shards, tokenizer, store)


def continue_checkpoint(store: ArtifactStore, corpus: Corpus, folder: Path) -> ArtifactRef:
    """Pretraining continued from the tiny BERT checkpoint in `folder`, as the pipeline runs it."""
    if not folder.is_dir():
        tiny_checkpoint("bert", folder, vocab_size=write_tokenizer(folder, "wordpiece"))
    tokenizer = import_tokenizer(folder, corpus, store)
    imported = import_checkpoint(folder, tokenizer, store)
    shards = build_shards(ShardSettings(seq_len=32), corpus, tokenizer, store)
    model = shape_keys(peek_checkpoint(folder))
    settings = PretrainSettings(model, ObjectiveSettings(), TRAINER, 3)
    start = InitPoint("checkpoint", folder).imported(imported)
    return pretrain(settings, shards, tokenizer, store, start=start)


if __name__ == "__main__":
    run(Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:])
