"""Task heads over the encoder: masked-LM pretraining, sequence and token classification."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lightning_modules.models.config import IGNORE_INDEX, POOLINGS, EncoderConfig
from lightning_modules.models.dropout import Dropout
from lightning_modules.models.encoder import BertEncoder, Embeddings, init_bert_weights
from lightning_modules.models.vocab_loss import vocab_cross_entropy


@dataclass
class MaskedLMOutput:
    """Loss plus the logits and targets at the selected positions only."""

    loss: torch.Tensor
    logits: torch.Tensor
    targets: torch.Tensor


class MaskedLMHead(nn.Module):
    """BERT's transform + decoder, with the decoder weight tied to the input embeddings.

    With factorised embeddings the transform maps the hidden size down to the embedding width
    first (ALBERT's and ELECTRA-generator's head), so the tied decoder still fits. Untied
    (`tie_word_embeddings=false`, as some checkpoints are saved) the decoder is an embedding table
    of the head's own, under the same name.
    """

    def __init__(self, config: EncoderConfig, word_embeddings: nn.Embedding) -> None:
        super().__init__()
        self.transform = nn.Linear(
            config.hidden_size, config.embedding_width, bias=config.linear_bias
        )
        self.norm = nn.LayerNorm(
            config.embedding_width, eps=config.layer_norm_eps, bias=config.norm_bias
        )
        self.word_embeddings = (
            word_embeddings
            if config.tie_word_embeddings
            else nn.Embedding(config.vocab_size, config.embedding_width)
        )
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.approximate = config.gelu_approximate
        init_bert_weights(self.transform, config.initializer_range)
        if not config.tie_word_embeddings:
            init_bert_weights(self.word_embeddings, config.initializer_range)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(self.transformed(hidden), self.word_embeddings.weight, self.bias)

    def transformed(self, hidden: torch.Tensor) -> torch.Tensor:
        """What the decoder reads; a prompt projects it onto its label words' rows alone."""
        return self.norm(F.gelu(self.transform(hidden), approximate=self.approximate))


class BertForMaskedLM(nn.Module):
    """Encoder + MLM head that projects onto the vocabulary only where labels are set.

    Gathering the ~15% selected positions before the vocabulary projection shrinks the largest
    matmul and the logits buffer by ~7x; this is where most of the CPU speed-up comes from.
    """

    def __init__(self, config: EncoderConfig, embeddings: Embeddings | None = None) -> None:
        super().__init__()
        self.config = config
        self.encoder = BertEncoder(config, embeddings)
        self.head = MaskedLMHead(config, self.encoder.embeddings.word)

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
    ) -> MaskedLMOutput:
        hidden = self.encoder(input_ids, attention_mask, document_ids=document_ids)
        flat_labels = labels.reshape(-1)
        selected = (flat_labels != IGNORE_INDEX).nonzero().squeeze(1)
        targets = flat_labels.index_select(0, selected)
        logits = self.head(hidden.reshape(-1, hidden.shape[-1]).index_select(0, selected))
        if targets.numel() == 0:
            # Keeps the graph connected so DDP and the optimiser see every parameter.
            return MaskedLMOutput(logits.sum() * 0.0, logits, targets)
        return MaskedLMOutput(vocab_cross_entropy(logits, targets), logits, targets)


class EncoderClassifier(nn.Module):
    """Encoder + dropout + a linear classifier: what BERT's two fine-tuning heads share.

    With a `pooling`, the sequence gets one label, from BERT's pooler (dense, tanh) over either
    the [CLS] vector (`cls`, BERT) or the mean of the non-padding positions (`mean`). MLM alone
    never trains the [CLS] output, so after a short pretraining the mean carries what the encoder
    learned and [CLS] little of it. Without a pooling every position gets its own label (tagging).
    """

    def __init__(
        self,
        config: EncoderConfig,
        num_labels: int,
        classifier_dropout: float,
        pooling: str | None,
    ) -> None:
        super().__init__()
        if num_labels < 2:
            task = "classification" if pooling else "tagging"
            raise ValueError(f"a {task} task needs at least 2 labels, got {num_labels}")
        if pooling is not None and pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r} is not one of {POOLINGS}")
        self.pooling = pooling
        self.encoder = BertEncoder(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if pooling else None
        self.dropout = Dropout(classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        if self.pooler is not None:
            init_bert_weights(self.pooler, config.initializer_range)
        init_bert_weights(self.classifier, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits `(batch, num_labels)` with a pooling, else `(batch, seq_len, num_labels)`;
        `token_type_ids` mark the second sentence of a pair."""
        hidden = self.encoder(input_ids, attention_mask, token_type_ids)
        if self.pooler is None:
            return self.classifier(self.dropout(hidden))
        if self.pooling == "mean":
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            summary = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        else:
            summary = hidden[:, 0]
        return self.classifier(self.dropout(torch.tanh(self.pooler(self.dropout(summary)))))


class BertForSequenceClassification(EncoderClassifier):
    """Encoder + BERT pooler over [CLS] (or the mean of the positions) + linear classifier."""

    def __init__(
        self,
        config: EncoderConfig,
        num_labels: int,
        classifier_dropout: float,
        pooling: str = "cls",
    ) -> None:
        super().__init__(config, num_labels, classifier_dropout, pooling)


class BertForTokenClassification(EncoderClassifier):
    """Encoder + a linear tagger on every position (BERT's NER head)."""

    def __init__(self, config: EncoderConfig, num_labels: int, classifier_dropout: float) -> None:
        super().__init__(config, num_labels, classifier_dropout, pooling=None)
