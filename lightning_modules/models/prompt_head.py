"""Prompt-based classification: the masked LM fills a template's [MASK] with a label's word.

PET (Schick & Schütze 2021) and LM-BFF (Gao et al. 2021) turn a sentence into a cloze, e.g.
"<sentence> It was [MASK] .", and score each label by the MLM head's logit for its word ("great",
"terrible"). Fine-tuning then starts from the pretraining objective itself: the head, its
transform and the label words' embeddings are all pretrained, where a classification head starts
from random weights. With few labels that is where pretraining can show; the random-init arm gets
the same architecture, its MLM head as random as the rest of it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.models.heads import BertForMaskedLM


class PromptClassifier(nn.Module):
    """Encoder + MLM head read at the template's one [MASK], restricted to the label words.

    Each input row holds exactly one `mask_token_id` (flows/downstream/tasks/prompting.py makes
    sure a text cannot add another). Logits `(batch, num_labels)` are the MLM head's logits of
    `label_token_ids`, in label order, so the task's cross-entropy and argmax apply unchanged.
    """

    label_token_ids: torch.Tensor

    def __init__(
        self, config: EncoderConfig, label_token_ids: list[int], mask_token_id: int
    ) -> None:
        super().__init__()
        if len(label_token_ids) < 2:
            raise ValueError(f"a prompt needs at least 2 label words, got {len(label_token_ids)}")
        self.masked_lm = BertForMaskedLM(config)
        self.mask_token_id = mask_token_id
        self.register_buffer("label_token_ids", torch.tensor(label_token_ids), persistent=False)

    @property
    def encoder(self) -> BertEncoder:
        """The masked LM's encoder, as every fine-tuning head names it (one module, one name)."""
        return self.masked_lm.encoder

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden = self.encoder(input_ids, attention_mask, token_type_ids)
        positions = (input_ids == self.mask_token_id).int().argmax(dim=1)
        at_mask = hidden[torch.arange(hidden.shape[0], device=hidden.device), positions]
        head = self.masked_lm.head
        return F.linear(
            head.transformed(at_mask),
            head.word_embeddings.weight[self.label_token_ids],
            head.bias[self.label_token_ids],
        )
