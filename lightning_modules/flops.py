"""Model FLOPs per trained token, for throughput in FLOP/s and model FLOPs utilisation (MFU)."""

from __future__ import annotations

from lightning_modules.models.config import ElectraConfig, EncoderConfig, generator_config


def encoder_flops_per_token(config: EncoderConfig, seq_len: int) -> float:
    """Forward + backward FLOPs of the encoder body for one token (PaLM's MFU convention).

    6 FLOPs per matmul parameter and token, plus the attention score and value products. Shared
    layers count once per use: sharing saves parameters, not compute. GeGLU has three
    `hidden x intermediate` matrices (value, gate, down) where BERT has two. Sliding-window layers
    count as global: their banded mask is applied to dense scores, so they compute as much.
    """
    hidden, layers = config.hidden_size, config.num_layers
    feed_forward_matrices = 3 if config.feed_forward == "geglu" else 2
    per_layer = 4 * hidden * hidden + feed_forward_matrices * hidden * config.intermediate_size
    projection = config.embedding_width * hidden if config.factorised_embeddings else 0
    return 6 * (layers * per_layer + projection) + 12 * layers * hidden * seq_len


def mlm_training_flops_per_token(config: EncoderConfig, seq_len: int, mask_rate: float) -> float:
    """The encoder, and the vocabulary projection only at the selected fraction of tokens.

    Projecting every position is wasted work, so a path that does it scores a lower MFU for the
    same learning.
    """
    width = config.embedding_width
    head = config.hidden_size * width + width * config.vocab_size
    return encoder_flops_per_token(config, seq_len) + 6 * mask_rate * head


def electra_training_flops_per_token(
    config: EncoderConfig, electra: ElectraConfig, seq_len: int, mask_rate: float
) -> float:
    """The generator as a masked LM, plus the discriminator and its head at every token."""
    generator = mlm_training_flops_per_token(generator_config(config, electra), seq_len, mask_rate)
    head = config.hidden_size * (config.hidden_size + 1)
    return generator + encoder_flops_per_token(config, seq_len) + 6 * head
