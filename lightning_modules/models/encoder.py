"""A BERT-style Transformer encoder in plain torch.

Attention goes through `F.scaled_dot_product_attention` so the fused kernels are used wherever the
device has them; packed pretraining batches pass no mask at all, which keeps the fastest path open.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

NORM_PLACEMENTS = ("post", "pre")


@dataclass(frozen=True)
class EncoderConfig:
    """Shape of the encoder; the field names are the `model.*` config keys users edit."""

    vocab_size: int
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 2
    intermediate_size: int = 512
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    norm_placement: str = "post"
    initializer_range: float = 0.02
    pad_token_id: int = 0
    # ALBERT's factorised embeddings: embed at this width, then project to `hidden_size`
    # (null, or equal to `hidden_size`: no projection, as BERT).
    embedding_size: int | None = None
    # ALBERT's cross-layer sharing: one block's weights applied `num_layers` times.
    share_layers: bool = False

    def __post_init__(self) -> None:
        for key in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"model.{key}={value!r} must be a positive integer")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.hidden_size={self.hidden_size} is not divisible by "
                f"model.num_heads={self.num_heads}; pick a head count that divides it"
            )
        for key in ("dropout", "attention_dropout"):
            value = getattr(self, key)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"model.{key}={value!r} must be in [0, 1)")
        if self.norm_placement not in NORM_PLACEMENTS:
            raise ValueError(
                f"model.norm_placement={self.norm_placement!r} must be one of {NORM_PLACEMENTS}"
            )
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"pad_token_id={self.pad_token_id} is outside the vocabulary")
        if self.embedding_size is not None and (
            not isinstance(self.embedding_size, int) or self.embedding_size < 1
        ):
            raise ValueError(
                f"model.embedding_size={self.embedding_size!r} must be a positive integer, "
                "or null to embed at model.hidden_size"
            )
        if not isinstance(self.share_layers, bool):
            raise ValueError(f"model.share_layers={self.share_layers!r} must be true or false")

    @property
    def embedding_width(self) -> int:
        return self.hidden_size if self.embedding_size is None else self.embedding_size

    @property
    def factorised_embeddings(self) -> bool:
        """True when embeddings need a projection to the hidden size (E != H)."""
        return self.embedding_width != self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Embeddings(nn.Module):
    """Word + position + token-type embeddings at `embedding_width`, normalised."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        width = config.embedding_width
        self.word = nn.Embedding(config.vocab_size, width, config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, width)
        self.token_type = nn.Embedding(config.type_vocab_size, width)
        self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        positions = torch.arange(seq_len, device=input_ids.device)
        hidden = self.word(input_ids) + self.position(positions)
        if token_type_ids is None:
            hidden = hidden + self.token_type.weight[0]
        else:
            hidden = hidden + self.token_type(token_type_ids)
        return self.dropout(self.norm(hidden))


class SelfAttention(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.hidden_size // config.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_dropout = config.attention_dropout

    def forward(self, hidden: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        batch, seq_len, width = hidden.shape
        qkv = self.qkv(hidden).view(batch, seq_len, 3, self.num_heads, self.head_dim)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        context = F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=attn_mask,
            dropout_p=self.attention_dropout if self.training else 0.0,
        )
        return self.out(context.transpose(1, 2).reshape(batch, seq_len, width))


class FeedForward(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(hidden)))


class EncoderLayer(nn.Module):
    """One Transformer block; post-LN is BERT's placement, pre-LN trains more stably when deep."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.feed_forward = FeedForward(config)
        self.feed_forward_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.norm_placement == "pre"

    def forward(self, hidden: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        if self.pre_norm:
            hidden = hidden + self.dropout(self.attention(self.attention_norm(hidden), attn_mask))
            return hidden + self.dropout(self.feed_forward(self.feed_forward_norm(hidden)))
        hidden = self.attention_norm(hidden + self.dropout(self.attention(hidden, attn_mask)))
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
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(unique_layers))
        self.final_norm = (
            nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            if config.norm_placement == "pre"
            else nn.Identity()
        )
        for child in self.children():
            if child is not embeddings:
                child.apply(lambda module: init_bert_weights(module, config.initializer_range))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if input_ids.shape[1] > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {input_ids.shape[1]} exceeds "
                f"model.max_position_embeddings={self.config.max_position_embeddings}"
            )
        attn_mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            # Boolean mask broadcast over heads and query positions: True means "may attend".
            attn_mask = attention_mask.bool()[:, None, None, :]
        hidden = self.embedding_projection(self.embeddings(input_ids, token_type_ids))
        for index in range(self.config.num_layers):
            hidden = self.layers[index % len(self.layers)](hidden, attn_mask)
        return self.final_norm(hidden)


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
        nn.init.zeros_(module.bias)
