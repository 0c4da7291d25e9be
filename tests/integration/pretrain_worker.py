"""The pretrain stage in a process of its own, so a test can SIGKILL it mid-run."""

from __future__ import annotations

import sys
from pathlib import Path

from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.corpora import CorpusSettings, open_corpus
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import PretrainSettings, pretrain
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, train_tokenizer
from flows.training.trainer import TrainerSettings

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
TRAINER = TrainerSettings(
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
    tokenizer = train_tokenizer(TokenizerSettings(vocab_size=200), corpus, store)
    shards = build_shards(ShardSettings(seq_len=32), corpus, tokenizer, store)
    settings = PretrainSettings(MODELS[model], ObjectiveSettings(), TRAINER, seed=3)
    return pretrain(settings, shards, tokenizer, store)


if __name__ == "__main__":
    run(Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:])
