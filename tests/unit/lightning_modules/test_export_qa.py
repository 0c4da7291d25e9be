"""A fine-tuned question-answering model loads in `transformers` as
`AutoModelForQuestionAnswering` and gives the same start and end logits."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer

from lightning_modules.export_qa import export_question_answering
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.qa_head import PADDING_LOGIT, BertForQuestionAnswering
from tests.fakes import SPECIALS, tiny_tokenizer


def test_auto_model_for_question_answering_gives_equal_start_and_end_logits(
    tmp_path: Path,
) -> None:
    from transformers import AutoModelForQuestionAnswering

    torch.manual_seed(0)
    tokenizer_file = tiny_tokenizer(tmp_path / "tokenizer.json")
    vocab = Tokenizer.from_file(str(tokenizer_file)).get_vocab_size()
    config = EncoderConfig(
        vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64
    )
    model = BertForQuestionAnswering(config)
    with torch.no_grad():  # non-trivial biases and norms, so a misplaced tensor shows
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.eval()
    export_question_answering(model, tokenizer_file, SPECIALS, "wordpiece", True, tmp_path / "hf")
    theirs = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "hf").eval()
    input_ids = torch.randint(5, vocab, (2, 12))
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 6:] = 1  # a question and its context
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 9:] = 0
    with torch.no_grad():
        mine = model(input_ids, attention_mask, token_type_ids)
        reference = theirs(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )
    for row, length in ((0, 12), (1, 9)):
        assert torch.allclose(
            mine[row, 0, :length], reference.start_logits[row, :length], atol=1e-4
        )
        assert torch.allclose(mine[row, 1, :length], reference.end_logits[row, :length], atol=1e-4)
    assert (mine[1, :, 9:] == PADDING_LOGIT).all()  # ours rules padding out of every span
