"""Pretraining throughput: Cloze's training step against `transformers`, same data and config.

Cloze runs as in a real pipeline run: `MaskedLanguageModelingModule` through a Lightning Trainer,
fed by the shard data module and the masking collator. The peer is `BertForMaskedLM` (sdpa
attention) with `DataCollatorForLanguageModeling` in a plain torch loop. Both get the same packed
sequences (WikiText-2 test, shards built by Cloze's own stages), the same shape, vocab size, batch,
learning rate and step count. Each path runs in its own process, so peak RSS is its own.

MFU counts, for both paths, the FLOPs the objective needs per token (6 x matmul parameters with
the vocabulary projection at the 15% masked tokens only, plus attention), divided by a matmul
peak measured in the same run.

    python -m benchmarks.train_throughput --models bert-mini,bert-tiny,bert-small --steps 30
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from benchmarks.common import data_file, in_child_process, markdown_table, matmul_peak_gflops
from lightning_modules.flops import mlm_training_flops_per_token
from lightning_modules.models.encoder import EncoderConfig

MODELS = {
    "bert-tiny": {"hidden_size": 128, "num_layers": 2, "num_heads": 2, "intermediate_size": 512},
    "bert-mini": {"hidden_size": 256, "num_layers": 4, "num_heads": 4, "intermediate_size": 1024},
    "bert-small": {"hidden_size": 512, "num_layers": 4, "num_heads": 8, "intermediate_size": 2048},
}
VOCAB_SIZE = 30522
SEQ_LEN = 128
BATCH_SIZE = 32
LEARNING_RATE = 5e-4
SEED = 0
MASK_RATE = 0.15


def prepare_shards(work_dir: Path) -> tuple[Path, Path]:
    """Tokenizer and shards from Cloze's own stages; cached in work_dir across benchmark runs."""
    from flows.core.artifacts import ArtifactStore
    from flows.corpora import CorpusSettings, open_corpus
    from flows.stages.shards.stage import ShardSettings, build_shards
    from flows.stages.tokenizer import TokenizerSettings, train_tokenizer

    # WikiText-2 raw has no blank lines between articles, so the file is one paragraph of 1.3 M
    # characters; packing makes that harmless, and both paths train on the same sequences.
    corpus_settings = CorpusSettings(
        kind="files",
        paths=[str(data_file("wikitext-2-raw/wiki.test.raw"))],
        max_chars=4_000_000,
    )
    store = ArtifactStore(work_dir)
    tokenizer = train_tokenizer(
        TokenizerSettings(vocab_size=VOCAB_SIZE), open_corpus(corpus_settings), store
    )
    shards = build_shards(
        ShardSettings(seq_len=SEQ_LEN), open_corpus(corpus_settings), tokenizer, store
    )
    return shards.path, tokenizer.path


def flops_per_token(model: str) -> float:
    config = EncoderConfig(vocab_size=VOCAB_SIZE, **MODELS[model])
    return mlm_training_flops_per_token(config, SEQ_LEN, MASK_RATE)


def run_cloze(
    model: str,
    steps: int,
    warmup: int,
    shard_dir: str,
    tokenizer_dir: str,
    precision: str,
    compile_encoder: bool = False,
) -> dict[str, Any]:
    from flows.core.artifacts import ArtifactRef
    from flows.stages.tokenizer import load_tokenizer
    from flows.training.trainer import TrainerSettings, make_trainer
    from lightning_modules.data.collator import MaskingCollator, MaskingRule
    from lightning_modules.data.mlm_datamodule import MaskedLMDataModule
    from lightning_modules.mlm import MaskedLanguageModelingModule, ThroughputSettings
    from lightning_modules.models.heads import BertForMaskedLM
    from lightning_modules.optim import OptimizerSettings

    pl.seed_everything(SEED, verbose=False)
    trained = load_tokenizer(ArtifactRef("tokenizer", "", Path(tokenizer_dir), {}, True))
    network = BertForMaskedLM(
        EncoderConfig(vocab_size=VOCAB_SIZE, pad_token_id=trained.special.pad, **MODELS[model])
    )
    if compile_encoder:
        network.encoder.compile()  # as trainer.compile=true does; compiles in the warm-up steps
    collator = MaskingCollator(
        MaskingRule(), trained.vocab_size, trained.special.mask, trained.special.all(), SEED
    )
    data = MaskedLMDataModule(
        Path(shard_dir), collator, BATCH_SIZE, SEED, max_validation_sequences=0
    )
    module = MaskedLanguageModelingModule(
        network,
        OptimizerSettings(learning_rate=LEARNING_RATE, total_steps=steps, schedule="constant"),
        ThroughputSettings(steps, flops_per_token(model)),
    )
    clock = StepClock(warmup)
    settings = TrainerSettings(
        max_steps=steps,
        batch_size=BATCH_SIZE,
        warmup_steps=0,
        precision=precision,
        log_every_steps=steps,
    )  # type: ignore[arg-type]
    trainer = make_trainer(
        settings,
        Path("/tmp/cloze-bench"),
        [],
        [clock],
        max_steps=steps,
        limit_val_batches=0,
        enable_checkpointing=False,
    )
    trainer.fit(module, datamodule=data)
    return clock.result(steps - warmup)


class StepClock(pl.Callback):
    """Times the steps after warm-up and keeps every step's loss."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.losses: list[float] = []
        self.started = 0.0
        self.elapsed = 0.0

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
        if index == self.warmup:
            self.started = time.perf_counter()

    def on_train_batch_end(
        self, trainer: Any, module: Any, outputs: Any, batch: Any, index: int
    ) -> None:
        self.losses.append(float(outputs["loss"]))
        self.elapsed = time.perf_counter() - self.started

    def result(self, timed_steps: int) -> dict[str, Any]:
        return summarize(self.losses, self.elapsed, timed_steps)


def summarize(losses: list[float], elapsed: float, timed_steps: int) -> dict[str, Any]:
    return {
        "tokens_per_s": timed_steps * BATCH_SIZE * SEQ_LEN / elapsed,
        "loss_first": sum(losses[:3]) / 3,
        "loss_last": sum(losses[-5:]) / 5,
    }


def run_transformers(
    model: str, steps: int, warmup: int, shard_dir: str, tokenizer_dir: str, precision: str
) -> dict[str, Any]:
    from torch.utils.data import DataLoader, RandomSampler
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        PreTrainedTokenizerFast,
    )

    from lightning_modules.data.shard_format import PackedSequenceDataset, ShardIndex

    torch.manual_seed(SEED)
    shape = MODELS[model]
    config = BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=shape["hidden_size"],
        num_hidden_layers=shape["num_layers"],
        num_attention_heads=shape["num_heads"],
        intermediate_size=shape["intermediate_size"],
        attn_implementation="sdpa",
    )
    network = BertForMaskedLM(config)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(Path(tokenizer_dir) / "tokenizer.json"),
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    dataset = PackedSequenceDataset(Path(shard_dir), ShardIndex.load(Path(shard_dir)), "train")
    loader = DataLoader(
        dataset,
        batch_size=BATCH_SIZE,
        drop_last=True,
        sampler=RandomSampler(dataset, generator=torch.Generator().manual_seed(SEED)),
        collate_fn=lambda rows: collator([{"input_ids": row} for row in rows]),
    )
    optimizer = torch.optim.AdamW(
        network.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01
    )
    network.train()
    losses: list[float] = []
    started = 0.0
    batches = iter(loader)
    for step in range(steps):
        if step == warmup:
            started = time.perf_counter()
        batch = next(batches)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
            loss = network(input_ids=batch["input_ids"], labels=batch["labels"]).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(network.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return summarize(losses, time.perf_counter() - started, steps - warmup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="bert-mini,bert-tiny,bert-small")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--work-dir", type=Path, default=Path(".cloze/bench"))
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--compile", action="store_true", help="add torch.compile variants")
    args = parser.parse_args()
    shard_dir, tokenizer_dir = prepare_shards(args.work_dir)
    peaks = {"fp32": matmul_peak_gflops(torch.float32), "bf16": matmul_peak_gflops(torch.bfloat16)}
    rows = []
    for model in args.models.split(","):
        common = {
            "model": model,
            "steps": args.steps,
            "warmup": args.warmup,
            "shard_dir": str(shard_dir),
            "tokenizer_dir": str(tokenizer_dir),
        }
        reference = in_child_process(run_transformers, precision="32-true", **common)
        variants = [("cloze fp32", "32-true", False), ("cloze bf16", "bf16-mixed", False)]
        if args.compile:
            variants += [
                ("cloze fp32 compiled", "32-true", True),
                ("cloze bf16 compiled", "bf16-mixed", True),
            ]
        for name, precision, compiled in [("transformers fp32", "32-true", False), *variants]:
            result = (
                reference
                if name.startswith("transformers")
                else in_child_process(
                    run_cloze, precision=precision, compile_encoder=compiled, **common
                )
            )
            peak = peaks["bf16" if precision == "bf16-mixed" else "fp32"]
            rows.append(
                {
                    "model": model,
                    "path": name,
                    **result,
                    "speedup": result["tokens_per_s"] / reference["tokens_per_s"],
                    "mfu": result["tokens_per_s"] * flops_per_token(model) / (peak * 1e9),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    table = markdown_table(
        rows,
        [
            "model",
            "path",
            "tokens_per_s",
            "speedup",
            "peak_rss_mb",
            "loss_first",
            "loss_last",
            "mfu",
        ],
    )
    print(
        f"\nmatmul peak: fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s; "
        f"{args.steps} steps ({args.warmup} untimed), batch {BATCH_SIZE} x {SEQ_LEN}\n"
    )
    print(table)
    if args.output:
        args.output.write_text(json.dumps({"peaks_gflops": peaks, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
