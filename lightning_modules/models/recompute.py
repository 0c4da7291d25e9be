"""Pre-LN norms whose outputs are recomputed in backward instead of kept.

In a pre-LN layer each norm's output feeds one linear layer (the attention's `qkv`, the feed-
forward's `up`), which keeps it for its weight gradient, while the norm itself keeps its input.
The output is a function of that input, so keeping both stores the same information twice: 4 MiB
per norm, 44 MiB over modernbert-mini's eleven pre-LN norms at 4,096 tokens. Inside
`norms_recomputed`, a saved tensor that is such an output is packed as (norm, input) and
recomputed when backward unpacks it: one layer norm over the rows, bit for bit the forward's.

Only outputs of the norms passed through `normed` are touched; everything else autograd saves
goes through as is. Under `torch.compile` the hooks are left out: the compiler plans what to keep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

Normed = Callable[[nn.Module, torch.Tensor], torch.Tensor]


@contextmanager
def norms_recomputed() -> Iterator[Normed]:
    """Yields `normed(norm, hidden)`, which returns `norm(hidden)`; while the context is open,
    autograd keeps such an output as the norm and its input. The outputs are held until the
    context closes, so no other tensor can take their addresses in the meantime."""
    outputs: dict[int, tuple[nn.Module, torch.Tensor, torch.Tensor]] = {}

    def normed(norm: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        output = norm(hidden)
        # An identity (a first layer reading the embedding norm) has nothing to recompute.
        if output is not hidden and output.requires_grad and not torch.compiler.is_compiling():
            outputs[output.untyped_storage().data_ptr()] = (norm, hidden, output)
        return output

    def pack(tensor: torch.Tensor) -> Any:
        recipe = outputs.get(tensor.untyped_storage().data_ptr())
        if recipe is None or recipe[2].dtype != tensor.dtype:
            return tensor
        norm, hidden, _ = recipe
        return norm, hidden, tensor.size(), tensor.stride(), tensor.storage_offset()

    def unpack(packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        norm, hidden, size, stride, offset = packed
        with torch.no_grad():
            return norm(hidden).as_strided(size, stride, offset)

    if torch.compiler.is_compiling():
        yield normed
        return
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield normed
    finally:
        # Autograd holds `pack` as long as what it packed: the outputs must not stay with it.
        outputs.clear()
