"""Relation classification: the encoder read at the entity markers (Matching the Blanks).

A relation example is a sentence whose entities sit between marker tokens (`<e1>` ... `</e1>`).
Baldini Soares et al. (2019) compared ways of reading such a sentence and found the "entity
start" one best: the hidden states at each entity's start marker, concatenated. The markers are
tokens the pretrained vocabulary lacks, so they get new embedding rows (`extend_word_embeddings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from lightning_modules.models.config import RELATION_HEADS, EncoderConfig
from lightning_modules.models.dropout import Dropout
from lightning_modules.models.encoder import BertEncoder, init_bert_weights


class BertForRelationClassification(nn.Module):
    """Encoder + a dense tanh layer (BERT's pooler) + a linear classifier.

    `entity_start` feeds the pooler the hidden states at the start markers `start_ids`,
    concatenated in that order (the first entity's, then the second's: direction is kept);
    `cls` feeds it the [CLS] vector, as sentence classification does. Each input row holds each
    start marker exactly once (flows/downstream/tasks/relation.py windows long texts around them).
    """

    start_ids: torch.Tensor

    def __init__(
        self,
        config: EncoderConfig,
        num_labels: int,
        classifier_dropout: float,
        head: str,
        start_ids: Sequence[int],
    ) -> None:
        super().__init__()
        if head not in RELATION_HEADS:
            raise ValueError(f"head={head!r} is not one of {RELATION_HEADS}")
        if num_labels < 2 or len(start_ids) < 2:
            raise ValueError(
                f"a relation needs at least 2 labels and 2 entities, got {num_labels} labels "
                f"and {len(start_ids)} start markers"
            )
        self.head = head
        self.encoder = BertEncoder(config)
        entities = len(start_ids) if head == "entity_start" else 1
        self.pooler = nn.Linear(entities * config.hidden_size, config.hidden_size)
        self.dropout = Dropout(classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        init_bert_weights(self.pooler, config.initializer_range)
        init_bert_weights(self.classifier, config.initializer_range)
        self.register_buffer("start_ids", torch.tensor(list(start_ids)), persistent=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits `(batch, num_labels)`."""
        hidden = self.encoder(input_ids, attention_mask, token_type_ids)
        if self.head == "cls":
            summary = hidden[:, 0]
        else:
            rows = torch.arange(hidden.shape[0], device=hidden.device)
            positions = (input_ids.unsqueeze(-1) == self.start_ids).int().argmax(dim=1)
            summary = torch.cat([hidden[rows, column] for column in positions.T], dim=-1)
        return self.classifier(self.dropout(torch.tanh(self.pooler(self.dropout(summary)))))


def extend_word_embeddings(encoder: BertEncoder, token_ids: Sequence[int], seed: int) -> None:
    """Embedding rows for tokens added to the vocabulary after pretraining (entity markers),
    drawn from N(0, initializer_range) by a generator seeded with `seed`, so every arm of a seed
    starts them alike, whatever its other weights. The table grows when an id lies past its end;
    rows the encoder already had keep their weights unless listed."""
    old = encoder.embeddings.word
    size = max(old.num_embeddings, max(token_ids) + 1)
    if size > old.num_embeddings:
        weight = torch.zeros(size, old.embedding_dim, dtype=old.weight.dtype)
        weight[: old.num_embeddings] = old.weight.detach()
        encoder.embeddings.word = nn.Embedding(
            size, old.embedding_dim, old.padding_idx, _weight=weight
        )
        encoder.config = replace(encoder.config, vocab_size=size)
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randn(len(token_ids), old.embedding_dim, generator=generator)
    with torch.no_grad():
        encoder.embeddings.word.weight[list(token_ids)] = rows * encoder.config.initializer_range
