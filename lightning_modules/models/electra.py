"""ELECTRA's replaced-token detection (Clark et al. 2020) in plain torch.

A small masked-LM generator fills the masked positions with samples; the discriminator learns,
at every token, whether it was replaced. Learning from every token rather than the ~15% masked
is what makes ELECTRA more sample-efficient than MLM. The discriminator is what transfers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lightning_modules.models.config import (
    IGNORE_INDEX,
    ElectraConfig,
    EncoderConfig,
    generator_config,
)
from lightning_modules.models.encoder import BertEncoder, init_bert_weights
from lightning_modules.models.heads import BertForMaskedLM


@dataclass
class ElectraOutput:
    """Losses and the discriminator's accuracy beside the all-original baseline it must beat."""

    loss: torch.Tensor
    generator_loss: torch.Tensor
    discriminator_loss: torch.Tensor
    discriminator_accuracy: torch.Tensor
    baseline_accuracy: torch.Tensor
    scored_tokens: torch.Tensor


class ReplacedTokenHead(nn.Module):
    """ELECTRA's discriminator head: dense, gelu, one logit per token (positive: replaced)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.prediction = nn.Linear(config.hidden_size, 1)
        self.approximate = config.gelu_approximate

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        activated = F.gelu(self.dense(hidden), approximate=self.approximate)
        return self.prediction(activated).squeeze(-1)


class ElectraForPreTraining(nn.Module):
    """Generator (masked LM) + discriminator sharing one embedding table, as in the paper.

    The generator is a `BertForMaskedLM` whose embeddings are the discriminator's; with its
    smaller hidden size it projects the shared embeddings down, and its head projects back up.
    """

    def __init__(self, config: EncoderConfig, electra: ElectraConfig) -> None:
        super().__init__()
        self.config = config
        self.electra = electra
        self.discriminator = BertEncoder(config)
        self.discriminator_head = ReplacedTokenHead(config)
        self.discriminator_head.apply(
            lambda module: init_bert_weights(module, config.initializer_range)
        )
        self.generator = BertForMaskedLM(
            generator_config(config, electra), self.discriminator.embeddings
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        original_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        sampler: torch.Generator | None = None,
        document_ids: torch.Tensor | None = None,
    ) -> ElectraOutput:
        """`input_ids` masked by the collator, `labels` its targets, `original_ids` unmasked;
        `document_ids` keep both networks' attention inside each packed document."""
        generated = self.generator(input_ids, labels, attention_mask, document_ids)
        sampled = sample_tokens(generated.logits, sampler)
        corrupted = original_ids.masked_scatter(labels != IGNORE_INDEX, sampled)
        # A sample equal to the original counts as original, as in the paper.
        replaced = (corrupted != original_ids).float()
        logits = self.discriminator_head(
            self.discriminator(corrupted, attention_mask, document_ids=document_ids)
        ).float()
        scored = (original_ids != self.config.pad_token_id).float()
        count = scored.sum()
        per_token = F.binary_cross_entropy_with_logits(logits, replaced, reduction="none")
        discriminator_loss = (per_token * scored).sum() / count
        correct = ((logits > 0).float() == replaced).float()
        return ElectraOutput(
            loss=generated.loss + self.electra.discriminator_weight * discriminator_loss,
            generator_loss=generated.loss,
            discriminator_loss=discriminator_loss,
            discriminator_accuracy=(correct * scored).sum() / count,
            baseline_accuracy=((1.0 - replaced) * scored).sum() / count,
            scored_tokens=count,
        )


@torch.no_grad()
def sample_tokens(logits: torch.Tensor, sampler: torch.Generator | None) -> torch.Tensor:
    """One draw per row from softmax(logits) by the Gumbel-max trick; no gradient flows back.

    argmax(logits - log E) with E ~ Exp(1) is a softmax sample; unlike `torch.multinomial` it
    needs no normalisation and handles zero rows.
    """
    noise = torch.empty_like(logits, dtype=torch.float32).exponential_(generator=sampler)
    return (logits.float() - noise.log()).argmax(-1)


def restore_original_ids(input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The unmasked ids: the collator keeps each selected position's original id as its label."""
    return torch.where(labels != IGNORE_INDEX, labels, input_ids)
