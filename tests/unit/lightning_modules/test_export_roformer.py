"""A BERT-shaped rotary model exports as `transformers`' RoFormerForMaskedLM, same logits; what
RoFormer cannot represent is refused on one line naming the keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer

from flows.stages.init_source import HUGGINGFACE_DIR
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import pretrain
from flows.stages.training_types import PretrainSettings
from flows.training.settings import TrainerSettings
from lightning_modules.export import can_export, export_huggingface
from lightning_modules.export_roformer import interleaved_order
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.rotary import RotaryEmbedding, apply_rotary
from lightning_modules.models.serialization import load_masked_lm
from tests.fakes import (
    SPECIALS,
    WordShards,
    logits_match,
    on_this_machine,
    perturbed,
    tiny_tokenizer,
)

ROTARY_BERT: dict[str, Any] = {  # `model=bert-tiny model.position_embedding=rotary`, smaller
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 512,
    "position_embedding": "rotary",
}


def test_each_heads_pairs_i_and_i_plus_half_become_neighbours() -> None:
    assert interleaved_order(num_heads=2, head_dim=4).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_our_rotation_is_roformers_on_the_reordered_dimensions() -> None:
    """Same frequencies, same direction: rotating then reordering is reordering then rotating
    with RoFormer's own table and function."""
    from transformers.models.roformer.modeling_roformer import (
        RoFormerSelfAttention,
        RoFormerSinusoidalPositionalEmbedding,
    )

    head_dim, seq_len = 16, 300
    vectors = torch.randn(1, 1, seq_len, head_dim, generator=torch.Generator().manual_seed(0))
    ours = apply_rotary(vectors, RotaryEmbedding(head_dim, 10_000.0)(torch.arange(seq_len)))
    table = RoFormerSinusoidalPositionalEmbedding(seq_len, head_dim).create_weight()
    order = interleaved_order(1, head_dim)
    theirs, _ = RoFormerSelfAttention.apply_rotary_position_embeddings(
        table[None, None], vectors[..., order], vectors[..., order]
    )
    # Angles reach 300 radians: fp32 rounds their sin/cos at ~1e-5, differently in each table.
    torch.testing.assert_close(theirs, ours[..., order], atol=1e-4, rtol=0)


@pytest.fixture(
    scope="module",
    # Shared layers are unrolled; factorised embeddings map to RoFormer's embeddings_project.
    params=[{}, {"share_layers": True, "embedding_size": 16}],
    ids=["bert-shape", "shared-factorised"],
)
def exported(request: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    directory = tmp_path_factory.mktemp("roformer")
    tokenizer_file = tiny_tokenizer(directory / "tokenizer.json")
    vocab = Tokenizer.from_file(str(tokenizer_file)).get_vocab_size()
    model = perturbed(EncoderConfig(vocab_size=vocab, **{**ROTARY_BERT, **request.param}))
    assert can_export(model)
    export_huggingface(model, tokenizer_file, SPECIALS, "wordpiece", True, directory / "hf")
    return model, directory / "hf"


def test_round_trip_at_384_tokens_with_padding_and_token_types(exported) -> None:
    from transformers import AutoModelForMaskedLM

    model, directory = exported
    theirs, loading = AutoModelForMaskedLM.from_pretrained(directory, output_loading_info=True)
    assert type(theirs).__name__ == "RoFormerForMaskedLM"
    assert not any(loading.values())  # no missing, unexpected or mismatched weight
    input_ids = torch.randint(5, model.config.vocab_size, (2, 384))
    token_type_ids = (torch.arange(384) >= 200).long().expand(2, -1)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 300:] = 0
    with torch.no_grad():
        ours = model.head(model.encoder(input_ids, attention_mask, token_type_ids))
        reference = theirs.eval()(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).logits
    torch.testing.assert_close(ours, reference, atol=1e-4, rtol=0)


def test_the_exported_position_table_is_roformers_own_sinusoid(exported) -> None:
    """Our frequencies 1/10000^(2i/d) in RoFormer's layout (sin of each pair, then cos): the
    table `transformers` would build itself, to fp32 rounding of the angles."""
    from transformers import AutoModelForMaskedLM

    _, directory = exported
    positions = AutoModelForMaskedLM.from_pretrained(directory).roformer.encoder.embed_positions
    with torch.no_grad():
        torch.testing.assert_close(positions.weight, positions.create_weight(), atol=1e-5, rtol=0)


def test_fill_mask_pipeline_runs_on_the_roformer_export(exported) -> None:
    """RoFormer's own tokenizer class needs rjieba (Chinese word splitting); the export names
    BERT's fast class over our tokenizer.json instead, which AutoTokenizer loads as it is."""
    from transformers import AutoTokenizer, pipeline

    _, directory = exported
    assert "RoFormer" not in type(AutoTokenizer.from_pretrained(directory)).__name__
    predictions = pipeline("fill-mask", model=str(directory), top_k=3)("the cat sat on the [MASK]")
    assert len(predictions) == 3
    assert all("[MASK]" not in prediction["sequence"] for prediction in predictions)


@pytest.mark.parametrize(
    ("options", "lacks"),
    [
        (
            {"rope_theta": 160_000.0},
            r"a RoPE base other than 10000 \(model\.rope_theta=160000\.0\)",
        ),
        ({"norm_placement": "pre"}, r"pre-LN blocks \(model\.norm_placement=pre\)"),
        ({"feed_forward": "geglu"}, r"a gated feed-forward \(model\.feed_forward=geglu\)"),
        (
            {"global_attention_every": 2},
            r"sliding-window layers \(model\.global_attention_every=2\)",
        ),
        (
            {"rope_theta": 500.0, "linear_bias": False},
            r"a RoPE base other than 10000 \(model\.rope_theta=500\.0\); bias-free linears "
            r"\(model\.linear_bias=false\)",
        ),
    ],
)
def test_a_rotary_model_roformer_cannot_represent_is_refused_naming_the_keys(
    options: dict[str, Any], lacks: str, tmp_path: Path
) -> None:
    model = perturbed(EncoderConfig(vocab_size=60, **{**ROTARY_BERT, **options}))
    assert not can_export(model)
    with pytest.raises(
        ValueError, match=f"^RoFormerForMaskedLM cannot represent this model; it lacks {lacks}$"
    ):
        export_huggingface(model, tmp_path / "t", SPECIALS, "wordpiece", True, tmp_path / "hf")


def test_the_pretrain_stage_exports_a_rotary_bert_as_roformer(word_shards: WordShards) -> None:
    from transformers import AutoModelForMaskedLM

    steps = on_this_machine(
        TrainerSettings(max_steps=2, warmup_steps=1, batch_size=4, val_every_steps=2)
    )
    settings = PretrainSettings(ROTARY_BERT, ObjectiveSettings(), steps, 0)
    result = pretrain(settings, word_shards.shards, word_shards.tokenizer, word_shards.store)
    assert result.outputs["huggingface_export"]
    ours = load_masked_lm(result.path).eval()
    theirs = AutoModelForMaskedLM.from_pretrained(result.path / HUGGINGFACE_DIR).eval()
    assert type(theirs).__name__ == "RoFormerForMaskedLM"
    assert logits_match(
        lambda ids, mask: ours.head(ours.encoder(ids, mask)), theirs, ours.config.vocab_size
    )
