"""Cloze's modernbert-mini against `transformers`' ModernBertForMaskedLM (sdpa): training tokens/s
and peak memory at several row lengths, in one run; also Cloze with every layer global, so the
cost of length shows for local against global attention.

Every path trains the same shape (fp32, AdamW) on the same seeded token rows with the same 30%
masked labels, in its own process (peak RSS is its own). `transformers` runs as shipped (dense
logits) and with `sparse_prediction` (logits at masked positions only, as Cloze always does).
Wall time on a shared machine measures the neighbours too: tokens per CPU-second are reported
beside it, with the fp32 matmul peak of this run. Ratios only; never read one number alone.

    PYTHONPATH=. .venv/bin/python -m benchmarks.modernbert_throughput --lengths 512 1024 2048
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import in_child_process, markdown_table
from benchmarks.step_timer import matmul_peaks

VOCAB = 8000
MASK_RATE = 0.3
PATHS = ("cloze", "cloze_all_global", "transformers", "transformers_sparse")


def shape(seq_len: int) -> dict[str, Any]:
    """modernbert-mini (conf/model/modernbert-mini.yaml) with the benchmark's vocabulary."""
    import yaml

    preset = yaml.safe_load(Path("conf/model/modernbert-mini.yaml").read_text())
    preset.pop("name")
    return {**preset, "vocab_size": VOCAB, "pad_token_id": 0, "max_position_embeddings": seq_len}


def rows(seq_len: int, tokens_per_step: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(
        5, VOCAB, (max(1, tokens_per_step // seq_len), seq_len), generator=generator
    )
    chosen = torch.rand(ids.shape, generator=generator) < MASK_RATE
    return torch.where(chosen, 4, ids), torch.where(chosen, ids, -100)


def build(path: str, config: dict[str, Any]) -> tuple[torch.nn.Module, Any]:
    """The network and a function (ids, labels) -> loss; `transformers` from our export config."""
    if path.startswith("cloze"):
        from lightning_modules.models.encoder import EncoderConfig
        from lightning_modules.models.heads import BertForMaskedLM

        every = 1 if path == "cloze_all_global" else config["global_attention_every"]
        model = BertForMaskedLM(EncoderConfig(**{**config, "global_attention_every": every}))
        return model, lambda ids, labels: model(ids, labels).loss
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    from lightning_modules.export_modernbert import modernbert_config
    from lightning_modules.models.encoder import EncoderConfig

    values = modernbert_config(EncoderConfig(**config), {"cls": 1, "sep": 2})
    values.pop("architectures")
    values.pop("model_type")
    network = ModernBertForMaskedLM(
        ModernBertConfig(**values, sparse_prediction=path == "transformers_sparse")
    )
    network.config._attn_implementation = "sdpa"
    return network, lambda ids, labels: network(input_ids=ids, labels=labels).loss


def run_path(path: str, seq_len: int, tokens_per_step: int, steps: int, warmup: int) -> dict:
    torch.manual_seed(0)
    config = shape(seq_len)
    network, loss_of = build(path, config)
    optimizer = torch.optim.AdamW(network.parameters(), lr=1e-4)
    ids, labels = rows(seq_len, tokens_per_step, seed=1)
    wall = cpu = 0.0
    for step in range(warmup + steps):
        started, started_cpu = time.perf_counter(), time.process_time()
        loss = loss_of(ids, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= warmup:
            wall += time.perf_counter() - started
            cpu += time.process_time() - started_cpu
    tokens = ids.numel() * steps
    return {"tokens_per_s": tokens / wall, "tokens_per_cpu_s": tokens / cpu, "loss": loss.item()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--tokens-per-step", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    peaks = matmul_peaks()
    table = []
    for seq_len in args.lengths:
        results = {
            path: in_child_process(
                run_path,
                path=path,
                seq_len=seq_len,
                tokens_per_step=args.tokens_per_step,
                steps=args.steps,
                warmup=args.warmup,
            )
            for path in PATHS
        }
        reference = results["transformers"]
        for path, result in results.items():
            table.append(
                {
                    "seq_len": seq_len,
                    "path": path,
                    "tokens_per_s": result["tokens_per_s"],
                    "tokens_per_cpu_s": result["tokens_per_cpu_s"],
                    "peak_rss_mb": result["peak_rss_mb"],
                    "speed_vs_hf": result["tokens_per_cpu_s"] / reference["tokens_per_cpu_s"],
                    "memory_vs_hf": result["peak_rss_mb"] / reference["peak_rss_mb"],
                }
            )
    columns = list(table[0])
    print(markdown_table(table, columns))
    print(
        f"\nfp32 matmul peak (2048^3): {peaks['fp32']:.0f} GFLOP/s, "
        f"{peaks['fp32_cpu']:.0f} per CPU-s"
    )
    if args.output:
        args.output.write_text(json.dumps({"peaks_gflops": peaks, "rows": table}, indent=2))


if __name__ == "__main__":
    main()
