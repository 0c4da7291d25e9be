"""Cloze's modernbert-mini against `transformers`' ModernBertForMaskedLM (sdpa): training tokens/s
and peak memory at several row lengths, in one run; also Cloze with every layer global, and one
local against one global layer alone, so the cost of length shows for each kind of attention.

Every path trains the same shape (fp32, AdamW) on the same seeded token rows with the same 30%
masked labels, in its own process (peak RSS is its own; `transformers` is imported by every path,
so the baselines match). `train_mb` is the growth of RSS over the timed steps (the high-water
mark is reset after the model and data are built), the memory training itself takes; it
includes the freed pages glibc keeps in its heap. `allocated_mb` (one more step, see
`AllocatedPeak`) is the most the tensors take at once, without those pages.
`transformers` runs as shipped (dense logits) and with `sparse_prediction` (logits at masked
positions only, as Cloze always does).
Wall time on a shared machine measures the neighbours too: tokens per CPU-second are reported
beside it, with the fp32 matmul peak of this run. Ratios only; never read one number alone.

    PYTHONPATH=. .venv/bin/python -m benchmarks.modernbert_throughput --lengths 512 1024 2048
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.common import in_child_process, markdown_table
from benchmarks.step_timer import matmul_peaks

VOCAB = 8000
MASK_RATE = 0.3
PATHS = ("cloze", "cloze_all_global", "transformers", "transformers_sparse")


def shape(seq_len: int) -> dict[str, Any]:
    """modernbert-mini (conf/model/modernbert-mini.yaml over base.yaml, as Hydra composes them)
    with the benchmark's vocabulary."""
    import yaml

    base, preset = (
        yaml.safe_load(Path(f"conf/model/{name}.yaml").read_text())
        for name in ("base", "modernbert-mini")
    )
    values = {**base, **preset}
    for key in ("name", "defaults"):
        values.pop(key)
    return {**values, "vocab_size": VOCAB, "pad_token_id": 0, "max_position_embeddings": seq_len}


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
        from lightning_modules.models.config import EncoderConfig
        from lightning_modules.models.heads import BertForMaskedLM

        every = 1 if path == "cloze_all_global" else config["global_attention_every"]
        model = BertForMaskedLM(EncoderConfig(**{**config, "global_attention_every": every}))
        return model, lambda ids, labels: model(ids, labels).loss
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    from lightning_modules.export_modernbert import modernbert_config
    from lightning_modules.models.config import EncoderConfig

    values = modernbert_config(EncoderConfig(**config), {"cls": 1, "sep": 2})
    values.pop("architectures")
    values.pop("model_type")
    network = ModernBertForMaskedLM(
        ModernBertConfig(**values, sparse_prediction=path == "transformers_sparse")
    )
    network.config._attn_implementation = "sdpa"
    return network, lambda ids, labels: network(input_ids=ids, labels=labels).loss


def resident_mb(field: str) -> float:
    """VmRSS or VmHWM (the high-water mark) of this process, from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field} line: needs Linux")


def run_path(
    path: str, seq_len: int, tokens_per_step: int, steps: int, warmup: int, threads: int
) -> dict:
    import transformers  # noqa: F401  (every path pays the same import, so baselines compare)

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = shape(seq_len)
    network, loss_of = build(path, config)
    optimizer = torch.optim.AdamW(network.parameters(), lr=1e-4)
    ids, labels = rows(seq_len, tokens_per_step, seed=1)
    built_mb = resident_mb("VmRSS")
    # The reset below clears VmHWM and getrusage's ru_maxrss alike: keep the build's peak first.
    build_peak_mb = resident_mb("VmHWM")
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
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
    result = {
        "tokens_per_s": tokens / wall,
        "tokens_per_cpu_s": tokens / cpu,
        "train_mb": resident_mb("VmHWM") - built_mb,
        # the whole process's peak (build or training), before the measuring step below
        "peak_rss_mb": max(build_peak_mb, resident_mb("VmHWM")),
        "parameters": sum(parameter.numel() for parameter in network.parameters()),
        "loss": loss.item(),
    }
    with AllocatedPeak() as allocated:
        loss_of(ids, labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {**result, "allocated_mb": allocated.peak_mb}


class _MallInfo(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in [
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        ]
    ]


class AllocatedPeak(TorchDispatchMode):
    """The most memory allocated at once during one step, over what was allocated before it:
    glibc's bytes in use (heap chunks plus mmapped blocks, `mallinfo2`) sampled after every op,
    forward and backward. Unlike RSS it leaves out freed pages glibc keeps in its heap (on this
    machine, 300-600 MB after a few steps of either library): the memory the tensors take, what a
    caching allocator on a GPU would report as its peak."""

    def __enter__(self) -> AllocatedPeak:
        self._mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
        self._mallinfo2.restype = _MallInfo
        self._start = self._peak = self._in_use()
        return super().__enter__()

    def _in_use(self) -> int:
        info = self._mallinfo2()
        return info.uordblks + info.hblkhd

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self._peak = max(self._peak, self._in_use())
        return out

    @property
    def peak_mb(self) -> float:
        return (self._peak - self._start) / 1024 / 1024


def layer_costs(seq_len: int, tokens: int, repeats: int, threads: int) -> dict:
    """CPU-ms per 1,000 tokens of one global (layer 0) and one local (layer 1) layer of
    modernbert-mini, forward + backward, masks and plans built as the encoder builds them."""
    from lightning_modules.models.config import GLOBAL, LOCAL, EncoderConfig
    from lightning_modules.models.encoder import BertEncoder

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    encoder = BertEncoder(EncoderConfig(**shape(seq_len)))
    ids, _ = rows(seq_len, tokens, seed=1)
    hidden = torch.randn(*ids.shape, encoder.config.hidden_size, requires_grad=True)
    masks = encoder.attention_masks(seq_len, ids.device, None, None)
    rotary = encoder.rotary_tables(seq_len, ids.device)
    assert rotary is not None
    costs = {}
    for kind, index in ((GLOBAL, 0), (LOCAL, 1)):
        layer = encoder.layers[index]
        spent = []
        for _ in range(repeats + 1):  # the first is a warm-up
            started = time.process_time()
            layer(hidden, masks[kind], rotary[kind]).sum().backward()
            spent.append(time.process_time() - started)
        costs[kind] = 1000 * min(spent[1:]) / ids.numel() * 1000
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--tokens-per-step", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--layer-repeats", type=int, default=3)
    # One thread: on a shared 2-core machine two threads spin-wait for each other, which inflates
    # CPU-seconds (docs/results/2026-12-01-throughput.md); the matmul peaks use the same count.
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    peaks = matmul_peaks()
    table, layers = [], []
    for seq_len in args.lengths:
        results = {
            path: in_child_process(
                run_path,
                path=path,
                seq_len=seq_len,
                tokens_per_step=args.tokens_per_step,
                steps=args.steps,
                warmup=args.warmup,
                threads=args.threads,
            )
            for path in PATHS
        }
        costs = in_child_process(
            layer_costs,
            seq_len=seq_len,
            tokens=args.tokens_per_step,
            repeats=args.layer_repeats,
            threads=args.threads,
        )
        layers.append(
            {
                "seq_len": seq_len,
                "global_ms_per_ktok": costs["global"],
                "local_ms_per_ktok": costs["local"],
            }
        )
        reference = results["transformers"]
        for path, result in results.items():
            table.append(
                {
                    "seq_len": seq_len,
                    "path": path,
                    "tokens_per_s": result["tokens_per_s"],
                    "tokens_per_cpu_s": result["tokens_per_cpu_s"],
                    "peak_rss_mb": result["peak_rss_mb"],
                    "train_mb": result["train_mb"],
                    "speed_vs_hf": result["tokens_per_s"] / reference["tokens_per_s"],
                    "cpu_speed_vs_hf": result["tokens_per_cpu_s"] / reference["tokens_per_cpu_s"],
                    "peak_vs_hf": result["peak_rss_mb"] / reference["peak_rss_mb"],
                    "train_mb_vs_hf": result["train_mb"] / reference["train_mb"],
                    "allocated_mb": result["allocated_mb"],
                    "allocated_vs_hf": result["allocated_mb"] / reference["allocated_mb"],
                    "parameters": result["parameters"],
                }
            )
    first = layers[0]
    for row in layers:  # cost per token relative to the shortest length: 1.0 is linear growth
        row["global_growth"] = row["global_ms_per_ktok"] / first["global_ms_per_ktok"]
        row["local_growth"] = row["local_ms_per_ktok"] / first["local_ms_per_ktok"]
    print(markdown_table(table, list(table[0])))
    print()
    print(markdown_table(layers, list(layers[0])))
    print(
        f"\nfp32 matmul peak (2048^3): {peaks['fp32']:.0f} GFLOP/s, "
        f"{peaks['fp32_cpu']:.0f} per CPU-s; bf16 {peaks['bf16']:.0f}, {peaks['bf16_cpu']:.0f} "
        f"per CPU-s ({args.threads} thread(s))"
    )
    if args.output:
        args.output.write_text(
            json.dumps({"peaks_gflops": peaks, "rows": table, "layers": layers}, indent=2)
        )


if __name__ == "__main__":
    main()
