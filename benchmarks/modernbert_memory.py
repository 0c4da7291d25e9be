"""Where one training step's memory goes: the bytes autograd keeps for backward, by the op that
produced each kept tensor and the module it was made in, for Cloze's modernbert-mini and
`transformers`' ModernBertForMaskedLM (sdpa) on the same rows as `modernbert_throughput`.

Peak training memory is roughly: parameters, gradients and AdamW state (fixed by the shape, the
same in both libraries) plus what the forward pass keeps for backward plus backward's transient
gradients. Only the kept activations differ between implementations, so that is what is counted:
every tensor autograd saves (a `saved_tensors_hooks` pack hook), each storage once, parameters
left out, attributed to the op that wrote it (a dispatch mode) and to the module it came from.

    PYTHONPATH=. .venv/bin/python -m benchmarks.modernbert_memory --seq-len 1024
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from benchmarks.common import markdown_table
from benchmarks.modernbert_throughput import build, rows, shape

MB = 1024 * 1024


class _Producers(TorchDispatchMode):
    """Remembers, for every storage an op writes, that op and the module running it."""

    def __init__(self, modules: list[str]) -> None:
        super().__init__()
        self.modules = modules
        self.by_storage: dict[int, tuple[str, str]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        where = self.modules[-1] if self.modules else "(top)"
        inputs = {storage(tensor) for tensor in tree_leaves((args, kwargs)) if is_tensor(tensor)}
        for tensor in tree_leaves(out):
            # A view or an in-place op writes no new storage; a freed address reused by a later
            # op is that op's.
            if is_tensor(tensor) and storage(tensor) not in inputs:
                self.by_storage[storage(tensor)] = (func.overloadpacket.__name__, where)
        return out


def is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


@contextmanager
def module_stack(network: nn.Module) -> Iterator[list[str]]:
    """The qualified names of the modules whose forward is running, innermost last."""
    stack: list[str] = []

    def leave(*_: Any) -> None:  # a forward hook's return value would replace the output
        stack.pop()

    handles = []
    for name, module in network.named_modules():
        handles.append(module.register_forward_pre_hook(lambda *_, n=name: stack.append(n)))
        handles.append(module.register_forward_hook(leave))
    try:
        yield stack
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def observing_inner_hooks(record: Callable[[torch.Tensor], Any]) -> Iterator[None]:
    """Saved-tensor hooks the model opens itself (models/recompute.py) replace the outer ones
    while open: what their pack keeps as a tensor is passed to `record` too; what it packs as
    a recipe to recompute costs no memory and is not."""
    real = torch.autograd.graph.saved_tensors_hooks

    class Observed(real):  # type: ignore[misc,valid-type]
        def __init__(self, pack: Callable[[torch.Tensor], Any], unpack: Any) -> None:
            def observed(tensor: torch.Tensor) -> Any:
                packed = pack(tensor)
                if isinstance(packed, torch.Tensor):
                    record(packed)
                return packed

            super().__init__(observed, unpack)

    with patch.object(torch.autograd.graph, "saved_tensors_hooks", Observed):
        yield


def kept_for_backward(
    path: str, seq_len: int, tokens_per_step: int, bf16: bool
) -> list[dict[str, Any]]:
    """One forward of `path` (under bf16 autocast, as `trainer.precision=bf16-mixed`, with
    `bf16`): the bytes kept for backward, by (module, producing op)."""
    torch.manual_seed(0)
    network, loss_of = build(path, shape(seq_len))
    ids, labels = rows(seq_len, tokens_per_step, seed=1)
    parameters = {storage(parameter) for parameter in network.parameters()}
    saved: dict[int, tuple[int, str, str]] = {}

    with module_stack(network) as stack, _Producers(stack) as producers:

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            pointer = storage(tensor)
            if pointer not in parameters:  # a weight kept for backward costs nothing extra
                op, where = producers.by_storage.get(pointer, ("(input)", "(top)"))
                saved[pointer] = (tensor.untyped_storage().nbytes(), op, where)
            return tensor

        with (
            observing_inner_hooks(pack),
            torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor),
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16),
        ):
            loss_of(ids, labels)
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for size, op, where in saved.values():
        totals[(layer_kind(path, where), op)] += size
    return [
        {"path": path, "module": where, "op": op, "saved_mb": size / MB}
        for (where, op), size in sorted(totals.items(), key=lambda item: -item[1])
    ]


def layer_kind(path: str, module: str) -> str:
    """`layers.3.attention.qkv` -> `global.attention.qkv`: the six layers folded into their
    two kinds (global layers 0 and 3), so the table shows a kind's total, not six rows."""
    match = re.search(r"layers\.(\d+)(.*)", module)
    if match is None:
        return re.sub(r"^(model\.|encoder\.)+", "", module)
    index = int(match.group(1))
    every = 1 if path == "cloze_all_global" else shape(2)["global_attention_every"]
    kind = "global" if index % every == 0 else "local"
    rest = match.group(2).replace(".attn", ".attention").replace(".mlp", ".ffn")
    return kind + rest.replace(".feed_forward", ".ffn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--tokens-per-step", type=int, default=4096)
    parser.add_argument("--paths", nargs="+", default=["cloze", "transformers"])
    parser.add_argument("--bf16", action="store_true", help="under bf16 autocast (bf16-mixed)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for path in args.paths:
        table = kept_for_backward(path, args.seq_len, args.tokens_per_step, args.bf16)
        total = sum(row["saved_mb"] for row in table)
        print(f"\n{path}: {total:.1f} MB kept for backward\n")
        print(markdown_table(table, ["module", "op", "saved_mb"]))


if __name__ == "__main__":
    main()
