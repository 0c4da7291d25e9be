"""A fine-tuned question-answering model as `transformers`' `BertForQuestionAnswering`: the
encoder in BERT's layout under `bert.`, and `qa_outputs` as is (the same layer, the same name),
so `AutoModelForQuestionAnswering` loads it and gives the same start and end logits."""

from __future__ import annotations

from pathlib import Path

from lightning_modules.export import bert_body_tensors, hf_config, write_folder
from lightning_modules.models.qa_head import BertForQuestionAnswering

ARCHITECTURE = "BertForQuestionAnswering"


def export_question_answering(
    model: BertForQuestionAnswering,
    tokenizer_file: Path,
    special_tokens: dict[str, str],
    tokenizer_kind: str,
    lowercase: bool,
    directory: Path,
) -> None:
    """A folder `AutoModelForQuestionAnswering.from_pretrained` loads (post-LN BERT shapes only,
    as `hf_config` checks)."""
    config = hf_config(model.config, ARCHITECTURE, model_type="bert")
    tensors = {
        **bert_body_tensors(model.encoder, "bert."),
        "qa_outputs.weight": model.qa_outputs.weight.detach().contiguous(),
        "qa_outputs.bias": model.qa_outputs.bias.detach().contiguous(),
    }
    write_folder(
        tensors, config, tokenizer_file, special_tokens, tokenizer_kind, lowercase, directory
    )
