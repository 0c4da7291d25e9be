"""Extractive question answering: a start and an end logit per token (BERT's SQuAD head).

One linear layer maps each hidden state to two scores, as `transformers`' `qa_outputs` does, so
the fine-tuned model exports as `BertForQuestionAnswering` (lightning_modules/export_qa.py).
The logits come out as `(batch, 2, seq_len)`: row 0 the starts, row 1 the ends. Flattened to
`(2 * batch, seq_len)` against `(batch, 2)` span labels flattened alike, one cross-entropy is the
mean of the start and end losses, BERT's loss, and the fine-tuning module needs no QA case.
"""

from __future__ import annotations

import torch
from torch import nn

from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.encoder import BertEncoder, init_bert_weights

# Padding positions' logit: far below any real one, finite so bf16 and the loss stay finite.
PADDING_LOGIT = -1.0e4


class BertForQuestionAnswering(nn.Module):
    """Encoder + `qa_outputs` (hidden -> start, end)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = BertEncoder(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        init_bert_weights(self.qa_outputs, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`(batch, 2, seq_len)` start and end logits; padding can be neither."""
        hidden = self.encoder(input_ids, attention_mask, token_type_ids)
        logits = self.qa_outputs(hidden).transpose(1, 2)
        return logits.masked_fill(~attention_mask.bool().unsqueeze(1), PADDING_LOGIT)
