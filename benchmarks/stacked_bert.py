"""K BERT sequence classifiers of one shape in one forward: the best case of a batched ensemble.

`torch.func.vmap` over `functional_call` has no batching rule for the CPU SDPA kernel, so it
loops over the members there (a warning says so) and measures a fallback, not the ensemble.
This writes the demo's classifier (post-LN BERT, absolute positions, token types, [CLS] pooler)
over parameters stacked on a leading member axis: every linear is one `baddbmm` for all members,
attention is one SDPA call over members x batch, the embeddings one gather from a table of all
members' rows. It is what a batched fine-tuning path could do at best;
`benchmarks.finetune_ceiling` checks that it gives each member its own model's logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lightning_modules.models.config import EncoderConfig

Stacked = dict[str, torch.Tensor]  # parameter name -> (members, *shape)


def supported(config: EncoderConfig, model: nn.Module) -> None:
    """Refuses a shape this forward does not write out (it covers the demo's)."""
    plain = (
        config.norm_placement == "post"
        and config.position_embedding == "absolute"
        and config.feed_forward == "gelu"
        and config.linear_bias
        and config.norm_bias
        and config.type_vocab_size > 0
        and config.embedding_size is None
        and not config.share_layers
        and not config.has_local_layers
        and not config.document_attention
        and getattr(model, "pooling", None) == "cls"
    )
    if not plain:
        raise ValueError("stacked_bert covers post-LN BERT with [CLS] pooling only")


def linear(stacked: Stacked, name: str, hidden: torch.Tensor) -> torch.Tensor:
    """`hidden` (members, rows, in) through each member's own linear: one batched matmul."""
    weight, bias = stacked[f"{name}.weight"], stacked[f"{name}.bias"]
    return torch.baddbmm(bias.unsqueeze(1), hidden, weight.transpose(1, 2))


def norm(stacked: Stacked, name: str, hidden: torch.Tensor, eps: float) -> torch.Tensor:
    normed = F.layer_norm(hidden, hidden.shape[-1:], eps=eps)
    weight, bias = stacked[f"{name}.weight"], stacked[f"{name}.bias"]
    return torch.addcmul(bias.unsqueeze(1), normed, weight.unsqueeze(1))


def gather(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Rows of each member's table (members, rows, width) at `ids` (batch, seq), the same ids for
    every member: (members, batch x seq, width)."""
    return table.index_select(1, ids.reshape(-1))


def stacked_logits(
    stacked: Stacked,
    config: EncoderConfig,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor,
) -> torch.Tensor:
    """Logits (members, batch, labels) of every member on one batch."""
    members = stacked["encoder.embeddings.word.weight"].shape[0]
    batch, seq_len = input_ids.shape
    width, heads, eps = config.hidden_size, config.num_heads, config.layer_norm_eps
    prefix = "encoder.embeddings"
    tokens = gather(stacked[f"{prefix}.word.weight"], input_ids) + gather(
        stacked[f"{prefix}.token_type.weight"], token_type_ids
    )
    positions = stacked[f"{prefix}.position.weight"][:, None, :seq_len]
    hidden = (tokens.view(members, batch, seq_len, width) + positions).flatten(1, 2)
    hidden = norm(stacked, f"{prefix}.norm", hidden, eps)
    keys = attention_mask.bool()[:, None, None, :].repeat(members, 1, 1, 1)
    for index in range(config.num_layers):
        layer = f"encoder.layers.{index}"
        qkv = linear(stacked, f"{layer}.attention.qkv", hidden)
        qkv = qkv.view(members * batch, seq_len, 3, heads, width // heads)
        query, key, value = (part.transpose(1, 2) for part in qkv.unbind(2))
        context = F.scaled_dot_product_attention(query, key, value, attn_mask=keys)
        context = context.transpose(1, 2).reshape(members, batch * seq_len, width)
        attended = linear(stacked, f"{layer}.attention.out", context)
        hidden = norm(stacked, f"{layer}.attention_norm", hidden + attended, eps)
        up = F.gelu(linear(stacked, f"{layer}.feed_forward.up", hidden))
        down = linear(stacked, f"{layer}.feed_forward.down", up)
        hidden = norm(stacked, f"{layer}.feed_forward_norm", hidden + down, eps)
    summary = hidden.view(members, batch, seq_len, width)[:, :, 0]
    pooled = torch.tanh(linear(stacked, "pooler", summary))
    return linear(stacked, "classifier", pooled)
