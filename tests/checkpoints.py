"""Tiny `transformers` checkpoints of every family Cloze imports, built offline.

`tiny_checkpoint` makes a small random model with `transformers` itself and `save_pretrained`s it:
the folder a user downloads, at a size a test can afford. Its weights are redrawn at a large scale
(std 0.5, random LayerNorm gains and shifts), so a mapping that swaps, transposes or shifts a
tensor changes the logits far beyond any tolerance. Tokenizer files are the caller's business.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

# Small and deliberately uneven (an FFN width no other dimension shares), each family's own way.
SHAPE: dict[str, Any] = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "max_position_embeddings": 64,
}
FAMILY_OPTIONS: dict[str, dict[str, Any]] = {
    "bert": {},
    "roberta": {"pad_token_id": 1, "max_position_embeddings": 66, "type_vocab_size": 1},
    "xlm-roberta": {"pad_token_id": 1, "max_position_embeddings": 66, "type_vocab_size": 1},
    "electra": {"embedding_size": 16},
    "albert": {"embedding_size": 16},  # AlbertConfig's hidden_act: gelu_new
    "distilbert": {},
    "roformer": {"embedding_size": 32},
    "modernbert": {
        "num_hidden_layers": 3,  # global, local, global
        "global_attn_every_n_layers": 2,
        "local_attention": 4,  # a window narrower than the test's sequences
        "pad_token_id": 0,
        "bos_token_id": 2,
        "eos_token_id": 3,
        "cls_token_id": 2,
        "sep_token_id": 3,
    },
}
DISTILBERT_RENAMES = {
    "hidden_size": "dim",
    "num_hidden_layers": "n_layers",
    "num_attention_heads": "n_heads",
    "intermediate_size": "hidden_dim",
}
CLASSES = {
    "bert": ("BertConfig", "BertForMaskedLM"),
    "roberta": ("RobertaConfig", "RobertaForMaskedLM"),
    "xlm-roberta": ("XLMRobertaConfig", "XLMRobertaForMaskedLM"),
    "electra": ("ElectraConfig", "ElectraForMaskedLM"),
    "albert": ("AlbertConfig", "AlbertForMaskedLM"),
    "distilbert": ("DistilBertConfig", "DistilBertForMaskedLM"),
    "modernbert": ("ModernBertConfig", "ModernBertForMaskedLM"),
    "roformer": ("RoFormerConfig", "RoFormerForMaskedLM"),
}


def tiny_checkpoint(
    model_type: str,
    directory: Path,
    *,
    vocab_size: int = 99,
    architecture: str | None = None,
    weights: str = "safetensors",
    scale: float = 0.5,
    seed: int = 0,
    **config_options: Any,
) -> Path:
    """A `save_pretrained` folder (config.json and weights, no tokenizer) of a tiny random
    `model_type` model; returns `directory`.

    `architecture`: the `transformers` class (default the family's masked LM; e.g.
    "ElectraForPreTraining", "BertForPreTraining", "BertModel"). `weights`: "safetensors",
    "sharded" (safetensors shards and their index) or "bin" (pytorch_model.bin). `scale`: the
    std the weights are redrawn at (0 keeps `transformers`' own initialisation).
    `config_options` override the config (`tie_word_embeddings=False`,
    `sinusoidal_pos_embds=True`, `hidden_act="gelu_new"`, ...).
    """
    import transformers

    config_class, default_class = CLASSES[model_type]
    options = {**SHAPE, **FAMILY_OPTIONS[model_type], "vocab_size": vocab_size, **config_options}
    if model_type == "distilbert":
        options = {DISTILBERT_RENAMES.get(key, key): value for key, value in options.items()}
    config = getattr(transformers, config_class)(**options)
    torch.manual_seed(seed)
    model = getattr(transformers, architecture or default_class)(config).eval()
    if scale:
        redraw(model, scale, seed, keep_positions=bool(options.get("sinusoidal_pos_embds")))
    shards = {"max_shard_size": "20KB"} if weights == "sharded" else {}
    model.save_pretrained(directory, **shards)
    if weights == "bin":
        # transformers 5 writes safetensors only; older versions pickled the whole state dict,
        # tied tensors under both names, as this does.
        (directory / "model.safetensors").unlink()
        torch.save(model.state_dict(), directory / "pytorch_model.bin")
    return directory


@torch.no_grad()
def redraw(model: torch.nn.Module, scale: float, seed: int, keep_positions: bool) -> None:
    """Every trainable parameter drawn again: norms' gains around 1 and everything else around
    0, all with std `scale`; tied parameters once (they are one tensor). Fixed sinusoid tables
    (RoFormer's, DistilBERT's with `sinusoidal_pos_embds`) stay sinusoids."""
    generator = torch.Generator().manual_seed(seed)
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad or (keep_positions and "position_embeddings" in name):
            continue
        noise = torch.randn(parameter.shape, generator=generator) * scale
        gain = name.endswith("weight") and parameter.dim() == 1
        parameter.copy_(1.0 + noise if gain else noise)
