"""A BERT-style Transformer encoder in plain torch.

Attention goes through `F.scaled_dot_product_attention` so the fused kernels are used wherever the
device has them; packed pretraining batches pass no mask at all, which keeps the fastest path open.
The ModernBERT-class options (rotary positions, GeGLU, bias-free layers, sliding-window layers,
document-aware attention) are config keys whose defaults are BERT's, so a BERT config computes
exactly what it did before they existed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lightning_modules.models.attention_masks import (
    combine,
    document_mask,
    padding_mask,
)
from lightning_modules.models.config import GLOBAL, LOCAL, EncoderConfig
from lightning_modules.models.dropout import Dropout, dropout
from lightning_modules.models.feed_forward import GatedFeedForward
from lightning_modules.models.local_attention import LocalWindow, local_attention, local_window
from lightning_modules.models.recompute import norms_recomputed
from lightning_modules.models.rotary import RotaryEmbedding, RotaryTables, apply_rotary

# What a layer attends under: a dense boolean mask (None: everywhere), or a sliding-window plan.
AttentionMask = torch.Tensor | LocalWindow | None


class Embeddings(nn.Module):
    """Word + position + token-type embeddings at `embedding_width`, normalised.

    Rotary models have no position table, and `type_vocab_size=0` no token-type table.
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        width = config.embedding_width
        self.word = nn.Embedding(config.vocab_size, width, config.pad_token_id)
        self.position = (
            nn.Embedding(config.max_position_embeddings, width)
            if config.position_embedding == "absolute"
            else None
        )
        self.token_type = (
            nn.Embedding(config.type_vocab_size, width) if config.type_vocab_size else None
        )
        self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps, bias=config.norm_bias)
        self.dropout = Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        hidden = self.word(input_ids)
        if self.position is not None:
            hidden = hidden + self.position(torch.arange(input_ids.shape[1], device=hidden.device))
        if self.token_type is not None:
            hidden = hidden + (
                self.token_type.weight[0]
                if token_type_ids is None
                else self.token_type(token_type_ids)
            )
        return self.dropout(self.norm(hidden))


class SelfAttention(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.hidden_size // config.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.linear_bias)
        self.out = nn.Linear(config.hidden_size, config.hidden_size, bias=config.linear_bias)
        self.attention_dropout = config.attention_dropout

    def forward(
        self,
        hidden: torch.Tensor,
        attn_mask: AttentionMask,
        rotary: RotaryTables | None = None,
    ) -> torch.Tensor:
        batch, seq_len, width = hidden.shape
        qkv = self.qkv(hidden).view(batch, seq_len, 3, self.num_heads, self.head_dim)
        # Unbinding the projection's own axis: backward stacks the three gradients straight into
        # the projection's layout (unbinding a permuted copy cost a strided copy of all three).
        query, key, value = (part.transpose(1, 2) for part in qkv.unbind(2))
        if rotary is not None:
            query, key = apply_rotary(query, rotary), apply_rotary(key, rotary)
            # Rotated queries and keys are new tensors: a compact copy of the values lets the
            # projection's output (three times the size) go instead of being kept for backward.
            value = value.transpose(1, 2).contiguous().transpose(1, 2)
        dropout = self.attention_dropout if self.training else 0.0
        if isinstance(attn_mask, LocalWindow):
            context = local_attention(query, key, value, attn_mask, dropout)
        elif dropout and hidden.device.type == "cpu":
            context = attention_with_dropout(query, key, value, attn_mask, dropout)
        else:
            context = F.scaled_dot_product_attention(
                query, key, value, attn_mask=attn_mask, dropout_p=dropout
            )
        return self.out(context.transpose(1, 2).reshape(batch, seq_len, width))


def attention_with_dropout(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    p: float,
) -> torch.Tensor:
    """SDPA's math path with the CPU dropout of models/dropout.py on the attention weights.

    With dropout on, SDPA on a CPU runs these steps (no fused CPU kernel takes dropout), but it
    casts bf16 inputs up to fp32 first (its batched matmuls were 13% of a bf16 bert-mini step)
    and draws the largest dropout mask of the step (heads x seq_len^2 per row) through the slow
    Bernoulli sampler. Here the matmuls run in the inputs' dtype, accumulating in fp32 inside the
    kernel. A query row whose keys are all masked (padding under `document_attention`) gets zero
    weights, as in SDPA, not the NaNs a softmax over nothing gives.
    """
    scores = (query * query.shape[-1] ** -0.5) @ key.transpose(-2, -1)
    if attn_mask is None:
        return dropout(scores.softmax(-1), p, training=True) @ value
    weights = scores.masked_fill(~attn_mask, float("-inf")).softmax(-1)
    weights = weights.masked_fill(~attn_mask.any(-1, keepdim=True), 0.0)
    return dropout(weights, p, training=True) @ value


class FeedForward(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.linear_bias)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.linear_bias)
        self.approximate = config.gelu_approximate

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(hidden), approximate=self.approximate))


class EncoderLayer(nn.Module):
    """One Transformer block; post-LN is BERT's placement, pre-LN trains more stably when deep."""

    def __init__(self, config: EncoderConfig, index: int = 0) -> None:
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm: nn.Module = (
            nn.Identity()
            if index == 0 and not config.first_attention_norm
            else layer_norm(config, config.hidden_size)
        )
        self.feed_forward: nn.Module = (
            GatedFeedForward(
                config.hidden_size,
                config.intermediate_size,
                config.linear_bias,
                config.gelu_approximate,
            )
            if config.feed_forward == "geglu"
            else FeedForward(config)
        )
        self.feed_forward_norm = layer_norm(config, config.hidden_size)
        self.dropout = Dropout(config.dropout)
        self.pre_norm = config.norm_placement == "pre"

    def forward(
        self,
        hidden: torch.Tensor,
        attn_mask: AttentionMask,
        rotary: RotaryTables | None = None,
    ) -> torch.Tensor:
        if self.pre_norm:
            with norms_recomputed() as normed:
                attended = self.attention(normed(self.attention_norm, hidden), attn_mask, rotary)
                hidden = hidden + self.dropout(attended)
                normed_hidden = normed(self.feed_forward_norm, hidden)
                return hidden + self.dropout(self.feed_forward(normed_hidden))
        hidden = self.attention_norm(
            hidden + self.dropout(self.attention(hidden, attn_mask, rotary))
        )
        return self.feed_forward_norm(hidden + self.dropout(self.feed_forward(hidden)))


class BertEncoder(nn.Module):
    """Token ids in, contextual hidden states out: the part that transfers downstream.

    `embeddings` lets two encoders share one embedding table (ELECTRA's generator and
    discriminator); a shared table is left as it is, not re-initialised.
    """

    def __init__(self, config: EncoderConfig, embeddings: Embeddings | None = None) -> None:
        super().__init__()
        self.config = config
        if embeddings is not None and embeddings.word.embedding_dim != config.embedding_width:
            raise ValueError(
                f"shared embeddings are {embeddings.word.embedding_dim} wide, but "
                f"model.embedding_size gives {config.embedding_width}"
            )
        self.embeddings = Embeddings(config) if embeddings is None else embeddings
        self.embedding_projection = (
            nn.Linear(config.embedding_width, config.hidden_size)
            if config.factorised_embeddings
            else nn.Identity()
        )
        unique_layers = 1 if config.share_layers else config.num_layers
        self.layers = nn.ModuleList(EncoderLayer(config, index) for index in range(unique_layers))
        self.final_norm = (
            layer_norm(config, config.hidden_size)
            if config.norm_placement == "pre"
            else nn.Identity()
        )
        self.rotary = rotary_embeddings(config)
        for child in self.children():
            if child is not embeddings:
                child.apply(lambda module: init_bert_weights(module, config.initializer_range))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states; `document_ids` (batch, seq_len) confine attention to each document
        (`model.document_attention`; the data module sets them for packed pretraining rows)."""
        seq_len = input_ids.shape[1]
        if seq_len > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {seq_len} exceeds "
                f"model.max_position_embeddings={self.config.max_position_embeddings}"
            )
        masks = self.attention_masks(seq_len, input_ids.device, attention_mask, document_ids)
        rotary = self.rotary_tables(seq_len, input_ids.device)
        hidden = self.embedding_projection(self.embeddings(input_ids, token_type_ids))
        for index in range(self.config.num_layers):
            kind = self.config.layer_kind(index)
            layer = self.layers[index % len(self.layers)]
            hidden = layer(hidden, masks[kind], rotary[kind] if rotary else None)
        return self.final_norm(hidden)

    def attention_masks(
        self,
        seq_len: int,
        device: torch.device,
        attention_mask: torch.Tensor | None,
        document_ids: torch.Tensor | None,
    ) -> dict[str, AttentionMask]:
        """Global layers' dense mask (padding, documents) and the sliding-window layers' plan
        (the same, within the band), shared by every layer of its kind in this forward."""
        keys = padding_mask(attention_mask)
        shared = combine(keys, None if document_ids is None else document_mask(document_ids))
        masks: dict[str, AttentionMask] = {GLOBAL: shared, LOCAL: shared}
        # A window reaching every key is global attention: the dense path is then the cheaper.
        if self.config.has_local_layers and self.config.local_attention // 2 < seq_len - 1:
            masks[LOCAL] = local_window(
                seq_len,
                self.config.local_attention,
                device,
                None if keys is None else attention_mask,
                document_ids,
            )
        return masks

    def rotary_tables(self, seq_len: int, device: torch.device) -> dict[str, RotaryTables] | None:
        if self.rotary is None:
            return None
        positions = torch.arange(seq_len, device=device)
        return {kind: table(positions) for kind, table in self.rotary.items()}


def rotary_embeddings(config: EncoderConfig) -> nn.ModuleDict | None:
    """Each layer kind's RoPE tables (computed, never saved), or None for learned positions."""
    if config.position_embedding != "rotary":
        return None
    head_dim = config.hidden_size // config.num_heads
    return nn.ModuleDict(
        {
            GLOBAL: RotaryEmbedding(head_dim, config.rope_theta),
            LOCAL: RotaryEmbedding(head_dim, config.local_rope_theta),
        }
    )


def layer_norm(config: EncoderConfig, width: int) -> nn.LayerNorm:
    return nn.LayerNorm(width, eps=config.layer_norm_eps, bias=config.norm_bias)


def init_bert_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation: N(0, std) weights, zero biases, unit LayerNorm."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
