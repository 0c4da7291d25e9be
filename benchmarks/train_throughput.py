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

`--device cuda` runs the same paths on a GPU (benchmarks/gpu_check.sh): same code, with bf16
autocast on the device (fp16 with a gradient scaler on a GPU without native bf16), SDPA's fused
kernels, pinned batches and non-blocking copies. bf16 rows are skipped, with the reason, where
bf16 is not native (benchmarks/precision_rows.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from benchmarks.common import data_file, in_child_process, markdown_table
from benchmarks.precision_rows import skip_reason
from benchmarks.step_timer import StepTimer, StepTimerCallback, matmul_peaks
from lightning_modules.flops import mlm_training_flops_per_token
from lightning_modules.models.config import EncoderConfig

MODELS = {
    "bert-tiny": {"hidden_size": 128, "num_layers": 2, "num_heads": 2, "intermediate_size": 512},
    "bert-mini": {"hidden_size": 256, "num_layers": 4, "num_heads": 4, "intermediate_size": 1024},
    "bert-small": {"hidden_size": 512, "num_layers": 4, "num_heads": 8, "intermediate_size": 2048},
    "bert-base": {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "intermediate_size": 3072},
}
VOCAB_SIZE = 30522
SEQ_LEN = 128
BATCH_SIZE = 32
LEARNING_RATE = 5e-4
SEED = 0
MASK_RATE = 0.15


def corpus_file(work_dir: Path, chars: int | None) -> Path:
    """WikiText-2 test, or (`chars`) its first `chars` characters, copied into work_dir: a
    smaller corpus for a run of seconds."""
    source = data_file("wikitext-2-raw/wiki.test.raw")
    if chars is None:
        return source
    work_dir.mkdir(parents=True, exist_ok=True)
    head = work_dir / f"wiki.test.{chars}.txt"
    with source.open(encoding="utf-8") as handle:
        head.write_text(handle.read(chars), encoding="utf-8")
    return head


def prepare_shards(work_dir: Path, chars: int | None = None) -> tuple[Path, Path]:
    """Tokenizer and shards from Cloze's own stages; cached in work_dir across benchmark runs.
    `chars`: the corpus's first characters only (corpus_file)."""
    from flows.core.artifacts import ArtifactStore
    from flows.corpora import CorpusSettings, open_corpus
    from flows.stages.shards.stage import ShardSettings, build_shards
    from flows.stages.tokenizer import TokenizerSettings, train_tokenizer

    # WikiText-2 raw has no blank lines between articles, so the file is one paragraph of 1.3 M
    # characters; packing makes that harmless, and both paths train on the same sequences.
    corpus_settings = CorpusSettings(
        kind="files",
        paths=[str(corpus_file(work_dir, chars))],
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
    profile_steps: int,
    threads: int,
    shard_dir: str,
    tokenizer_dir: str,
    precision: str,
    compile_encoder: bool = False,
    lightning: bool = True,
    device: str = "cpu",
) -> dict[str, Any]:
    """Cloze's module through a Lightning Trainer, as in a real run; or, with `lightning=False`,
    the same network, optimizer and loader in a bare torch loop (Lightning's overhead)."""
    from flows.core.artifacts import ArtifactRef
    from flows.stages.tokenizer import load_tokenizer
    from flows.training.settings import TrainerSettings
    from flows.training.trainer import make_trainer
    from lightning_modules.data.collator import MaskingCollator
    from lightning_modules.data.masking_rules import MaskingRule
    from lightning_modules.data.mlm_datamodule import MaskedLMDataModule
    from lightning_modules.mlm import MaskedLanguageModelingModule, ThroughputSettings
    from lightning_modules.models.heads import BertForMaskedLM
    from lightning_modules.optim_settings import OptimizerSettings

    torch.set_num_threads(threads)
    pl.seed_everything(SEED, verbose=False)
    timer = StepTimer(warmup, steps, profile_steps)
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
    optimizer = OptimizerSettings(
        learning_rate=LEARNING_RATE,
        total_steps=timer.total_steps,
        schedule="constant",
        warmup_steps=0,
    )
    module = MaskedLanguageModelingModule(
        network, optimizer, ThroughputSettings(timer.total_steps, flops_per_token(model))
    )
    if not lightning:
        data.setup("fit")
        bare_loop(module.to(device), data.train_dataloader(), precision, timer)
        return timer.result(BATCH_SIZE * SEQ_LEN)
    settings = TrainerSettings(
        max_steps=timer.total_steps,
        batch_size=BATCH_SIZE,
        warmup_steps=0,
        precision=precision,
        log_every_steps=timer.total_steps,
        accelerator="gpu" if device == "cuda" else "cpu",
    )  # type: ignore[arg-type]
    trainer = make_trainer(
        settings,
        Path("/tmp/cloze-bench"),
        [],
        [StepTimerCallback(timer)],
        max_steps=timer.total_steps,
        limit_val_batches=0,
        enable_checkpointing=False,
    )
    trainer.fit(module, datamodule=data)
    return timer.result(BATCH_SIZE * SEQ_LEN)


def bare_loop(module: Any, loader: Any, precision: str, timer: StepTimer) -> None:
    """What the Trainer does per step, minus Lightning: autocast (the Trainer's own mixed
    precision context, flows/training/precision.py), backward, clip, step."""
    from contextlib import nullcontext

    from flows.training.precision import ClippingMixedPrecision

    configured = module.configure_optimizers()
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    module.train()
    device = next(module.parameters()).device
    mixed = (
        ClippingMixedPrecision(precision, device.type)  # type: ignore[arg-type]
        if precision in ("bf16-mixed", "16-mixed")
        else None
    )
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "16-mixed")
    batches = iter(loader)
    for step in range(timer.total_steps):
        timer.before(step)
        batch = {name: t.to(device, non_blocking=True) for name, t in next(batches).items()}
        with mixed.forward_context() if mixed else nullcontext():
            loss = module.model(batch["input_ids"], batch["labels"]).loss
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        timer.after(step, loss)


def run_transformers(
    model: str,
    steps: int,
    warmup: int,
    profile_steps: int,
    threads: int,
    shard_dir: str,
    tokenizer_dir: str,
    precision: str,
    masked_only: bool,
    device: str = "cpu",
) -> dict[str, Any]:
    """`BertForMaskedLM` in a plain torch loop; `masked_only` applies the MLM head only where
    labels are set (the ten-line change a user can make to the peer)."""
    from torch.utils.data import DataLoader, RandomSampler
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
    )

    from lightning_modules.data.packed_dataset import PackedSequenceDataset
    from lightning_modules.data.shard_format import ShardIndex

    torch.set_num_threads(threads)
    torch.manual_seed(SEED)
    timer = StepTimer(warmup, steps, profile_steps)
    shape = MODELS[model]
    config = BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=shape["hidden_size"],
        num_hidden_layers=shape["num_layers"],
        num_attention_heads=shape["num_heads"],
        intermediate_size=shape["intermediate_size"],
        attn_implementation="sdpa",
    )
    network = BertForMaskedLM(config).to(device)
    collator = DataCollatorForLanguageModeling(
        peer_tokenizer(Path(tokenizer_dir)), mlm_probability=0.15
    )
    dataset = PackedSequenceDataset(Path(shard_dir), ShardIndex.load(Path(shard_dir)), "train")
    loader = DataLoader(
        dataset,
        batch_size=BATCH_SIZE,
        drop_last=True,
        sampler=RandomSampler(dataset, generator=torch.Generator().manual_seed(SEED)),
        collate_fn=lambda rows: collator([{"input_ids": row} for row in rows]),
        pin_memory=device == "cuda",
    )
    optimizer = torch.optim.AdamW(
        network.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01
    )
    network.train()
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device, enabled=precision == "16-mixed")
    batches = iter(loader)
    for step in range(timer.total_steps):
        timer.before(step)
        batch = {name: t.to(device, non_blocking=True) for name, t in next(batches).items()}
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            if masked_only:
                loss = masked_only_loss(network, batch["input_ids"], batch["labels"])
            else:
                loss = network(input_ids=batch["input_ids"], labels=batch["labels"]).loss
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(network.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        timer.after(step, loss)
    return timer.result(BATCH_SIZE * SEQ_LEN)


def peer_tokenizer(tokenizer_dir: Path) -> Any:
    """Cloze's trained tokenizer as the `transformers` peers load it (its BERT special tokens)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_dir / "tokenizer.json"),
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
    )


def masked_only_loss(network: Any, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The peer's encoder, then its MLM head at the masked positions only."""
    hidden = network.bert(input_ids=input_ids).last_hidden_state
    selected = labels != -100
    logits = network.cls(hidden[selected])
    return torch.nn.functional.cross_entropy(logits.float(), labels[selected])


# name -> (runner, precision, options); the peers first, so every ratio has its denominators.
PATHS: dict[str, tuple[Callable[..., dict[str, Any]], str, dict[str, bool]]] = {
    "transformers dense fp32": (run_transformers, "32-true", {"masked_only": False}),
    "transformers masked-only fp32": (run_transformers, "32-true", {"masked_only": True}),
    "transformers masked-only bf16": (run_transformers, "bf16-mixed", {"masked_only": True}),
    "cloze fp32": (run_cloze, "32-true", {}),
    "cloze bf16": (run_cloze, "bf16-mixed", {}),
    "cloze bf16 bare loop": (run_cloze, "bf16-mixed", {"lightning": False}),
    "cloze bf16 compiled": (run_cloze, "bf16-mixed", {"compile_encoder": True}),
    # A GPU without native bf16 (V100, T4): fp16 with a gradient scaler, as `auto` trains there.
    "transformers masked-only fp16": (run_transformers, "16-mixed", {"masked_only": True}),
    "cloze fp16": (run_cloze, "16-mixed", {}),
    "cloze fp16 bare loop": (run_cloze, "16-mixed", {"lightning": False}),
}
DEFAULT_PATHS = [name for name in PATHS if "compile" not in name and "fp16" not in name]


def measure(model: str, names: list[str], peaks: dict[str, float], **common: Any) -> list[dict]:
    """Each path in its own process; ratios per CPU-second against the two peers' best."""
    rows = []
    for name in names:
        runner, precision, options = PATHS[name]
        result = in_child_process(runner, model=model, precision=precision, **common, **options)
        print(f"\n{model} / {name}: top operators by self CPU time\n{result.pop('top_operators')}")
        peak = {"bf16-mixed": "bf16", "16-mixed": "fp16"}.get(precision, "fp32")
        rows.append(
            {
                "model": model,
                "path": name,
                **result,
                "mfu": result["tokens_per_s"] * flops_per_token(model) / (peaks[peak] * 1e9),
                "mfu_cpu": result["tokens_per_cpu_s"]
                * flops_per_token(model)
                / (peaks[f"{peak}_cpu"] * 1e9),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    for kind in ("dense", "masked-only"):
        peers = [row["tokens_per_cpu_s"] for row in rows if f"transformers {kind}" in row["path"]]
        for row in rows:
            row[f"vs {kind}"] = row["tokens_per_cpu_s"] / max(peers) if peers else float("nan")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="bert-mini,bert-small")
    parser.add_argument("--paths", default=",".join(DEFAULT_PATHS), help=f"of {list(PATHS)}")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile-steps", type=int, default=2, help="profiled after the timed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--work-dir", type=Path, default=Path(".cloze/bench"))
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument(
        "--corpus-chars", type=int, default=None, help="train on WikiText-2 test's first N only"
    )
    args = parser.parse_args()
    names = args.paths.split(",")
    if unknown := set(names) - set(PATHS):
        parser.error(f"unknown --paths {sorted(unknown)}; choose from {list(PATHS)}")
    skipped = {name: skip_reason(PATHS[name][1], args.device) for name in names}
    skipped = {name: reason for name, reason in skipped.items() if reason}
    for name, reason in skipped.items():
        print(f"skipped {name!r}: {reason}")
    names = [name for name in names if name not in skipped]
    shard_dir, tokenizer_dir = prepare_shards(args.work_dir, args.corpus_chars)
    torch.set_num_threads(args.threads)
    peaks = matmul_peaks(device=args.device)
    rows = []
    for model in args.models.split(","):
        rows += measure(
            model,
            names,
            peaks,
            steps=args.steps,
            warmup=args.warmup,
            profile_steps=args.profile_steps,
            threads=args.threads,
            shard_dir=str(shard_dir),
            tokenizer_dir=str(tokenizer_dir),
            device=args.device,
        )
    columns = ["model", "path", "tokens_per_s", "tokens_per_cpu_s", "vs dense", "vs masked-only"]
    columns += ["peak_rss_mb", "loss_first", "loss_last", "mfu", "mfu_cpu"]
    print(
        f"\nmatmul peak ({args.threads} threads, 2048^3): fp32 {peaks['fp32']:.0f} GFLOP/s "
        f"({peaks['fp32_cpu']:.0f} per CPU-s), bf16 {peaks['bf16']:.0f} GFLOP/s "
        f"({peaks['bf16_cpu']:.0f} per CPU-s); {args.steps} steps ({args.warmup} untimed), "
        f"batch {BATCH_SIZE} x {SEQ_LEN}\n"
    )
    print(markdown_table(rows, columns))
    if args.output:
        result = {"peaks_gflops": peaks, "rows": rows, "skipped": skipped}
        args.output.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
