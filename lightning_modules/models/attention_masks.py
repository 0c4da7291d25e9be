"""Boolean attention masks (True: may attend) for padding and documents.

Masks broadcast to SDPA's `(batch, heads, query, key)`; `None` means "attend everywhere" and keeps
the fused kernels' fastest path, so a mask is built only where one is needed. Sliding windows
are not a dense mask: `local_attention.py` plans them block by block.
"""

from __future__ import annotations

import torch


def padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """`(batch, 1, 1, key)` from a `(batch, seq_len)` mask of real tokens; None without padding."""
    if attention_mask is None or bool(attention_mask.all()):
        return None
    return attention_mask.bool()[:, None, None, :]


def document_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """`(batch, 1, query, key)`: block-diagonal, each token attends within its own document."""
    return (document_ids[:, :, None] == document_ids[:, None, :])[:, None]


def document_ids_from_separators(input_ids: torch.Tensor, sep_id: int) -> torch.Tensor:
    """Which document each token of a concat-packed row belongs to.

    Packing joins documents with [SEP] (flows/stages/shards/packing.py), and the [SEP] closes its
    document: a token's id is the number of [SEP]s strictly before it. Masking never selects or
    produces [SEP], so masked ids give the same boundaries as the originals.
    """
    separators = (input_ids == sep_id).long()
    return separators.cumsum(dim=1) - separators


def combine(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """The positions every given mask allows; None when no mask is given."""
    present = [mask for mask in masks if mask is not None]
    if not present:
        return None
    combined = present[0]
    for mask in present[1:]:
        combined = combined & mask
    return combined
