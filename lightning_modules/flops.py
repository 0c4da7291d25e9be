"""Model FLOPs per trained token, for throughput in FLOP/s and model FLOPs utilisation (MFU)."""

from __future__ import annotations

from lightning_modules.models.encoder import EncoderConfig


def mlm_training_flops_per_token(config: EncoderConfig, seq_len: int, mask_rate: float) -> float:
    """Forward + backward FLOPs the MLM objective needs for one token (PaLM's MFU convention).

    Counts 6 FLOPs per matmul parameter and token, the attention score and value products, and
    the vocabulary projection only at the selected fraction of tokens: projecting every position
    is wasted work, so a path that does it scores a lower MFU for the same learning.
    """
    hidden, layers = config.hidden_size, config.num_layers
    per_layer = 4 * hidden * hidden + 2 * hidden * config.intermediate_size
    head = hidden * hidden + hidden * config.vocab_size
    return 6 * (layers * per_layer + mask_rate * head) + 12 * layers * hidden * seq_len
