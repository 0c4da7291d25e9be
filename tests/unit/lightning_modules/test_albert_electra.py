"""ALBERT (factorised embeddings, shared layers) and ELECTRA (replaced-token detection)."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from lightning_modules.data.collator import MaskingCollator
from lightning_modules.data.masking_rules import MaskingRule
from lightning_modules.electra_module import ReplacedTokenDetectionModule
from lightning_modules.export import export_huggingface
from lightning_modules.mlm import ThroughputSettings
from lightning_modules.models.config import (
    IGNORE_INDEX,
    ElectraConfig,
    EncoderConfig,
    generator_config,
)
from lightning_modules.models.electra import ElectraForPreTraining, restore_original_ids
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.models.serialization import (
    count_parameters,
    load_electra,
    load_encoder_weights,
    load_masked_lm,
    save_electra,
    save_masked_lm,
)
from lightning_modules.optim import build_optimizer
from lightning_modules.optim_settings import OptimizerSettings
from tests.fakes import SPECIALS, logits_match, tiny_tokenizer

VOCAB, SEQ, PAD, MASK_ID = 200, 32, 0, 4
TINY = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 4,
    "intermediate_size": 128,
    "max_position_embeddings": SEQ,
    "dropout": 0.0,
    "attention_dropout": 0.0,
}
ALBERT = {**TINY, "embedding_size": 16, "share_layers": True}


def jitter(model: torch.nn.Module) -> None:
    """Non-trivial biases and norms, so a misplaced tensor shows in the logits."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))


def repeated_pairs(batch: int, generator: torch.Generator) -> torch.Tensor:
    """Each row alternates two of 20 tokens: a replaced token stands out from its context."""
    pair = torch.randint(5, 25, (batch, 2), generator=generator)
    return pair.repeat(1, SEQ // 2)


def test_new_keys_are_validated_by_name() -> None:
    with pytest.raises(ValueError, match=r"model.embedding_size=0 must be a positive integer"):
        EncoderConfig(vocab_size=10, embedding_size=0)
    with pytest.raises(ValueError, match=r"model.share_layers='yes' must be true or false"):
        EncoderConfig(vocab_size=10, share_layers="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"objective.generator_size_fraction=0.0"):
        ElectraConfig(generator_size_fraction=0.0)
    with pytest.raises(ValueError, match=r"objective.generator_hidden_size=24 must be a multiple"):
        generator_config(EncoderConfig(**TINY), ElectraConfig(generator_hidden_size=24))


def test_albert_shares_one_block_and_projects_embeddings() -> None:
    torch.manual_seed(0)
    shallow = BertForMaskedLM(EncoderConfig(**{**ALBERT, "num_layers": 1}))
    deep = BertForMaskedLM(EncoderConfig(**{**ALBERT, "num_layers": 6}))
    assert len(deep.encoder.layers) == 1
    assert count_parameters(deep) == count_parameters(shallow)
    assert deep.encoder.embeddings.word.weight.shape == (VOCAB, 16)
    assert deep.head.transform.weight.shape == (16, 64)  # hidden -> E before the tied decoder
    assert deep.head.word_embeddings.weight is deep.encoder.embeddings.word.weight
    ids = torch.randint(5, VOCAB, (2, 8))
    hidden = deep.encoder.embedding_projection(deep.encoder.embeddings(ids, None))
    for _ in range(6):
        hidden = deep.encoder.layers[0](hidden, None)
    assert torch.allclose(deep.encoder(ids), hidden)


def test_albert_masked_lm_lowers_its_loss_in_20_steps() -> None:
    torch.manual_seed(0)
    model = BertForMaskedLM(EncoderConfig(**ALBERT))
    # A higher rate than BERT's tests: the 16-wide shared embeddings learn slowly at 3e-3.
    optimizer, _ = build_optimizer(
        model, OptimizerSettings(learning_rate=1e-2, total_steps=20, warmup_steps=0)
    )
    input_ids = torch.randint(5, VOCAB, (8, SEQ))
    labels = torch.where(torch.rand(8, SEQ) < 0.3, input_ids, torch.full_like(input_ids, -100))
    losses = []
    for _ in range(20):
        loss = model(input_ids, labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0]


@pytest.mark.parametrize(
    ("embedding_size", "share_layers", "architecture"),
    [
        (16, True, "AlbertForMaskedLM"),
        (None, True, "AlbertForMaskedLM"),  # E == H: exported with an identity mapping
        (16, False, "ElectraForMaskedLM"),  # factorised, unshared: ELECTRA's generator class
    ],
)
def test_masked_lm_export_loads_in_transformers_with_equal_logits(
    tmp_path: Path, embedding_size: int | None, share_layers: bool, architecture: str
) -> None:
    import transformers

    torch.manual_seed(0)
    tokenizer_file = tiny_tokenizer(tmp_path / "tokenizer.json")
    config = EncoderConfig(
        **{**TINY, "vocab_size": 120, "embedding_size": embedding_size},
        share_layers=share_layers,
    )
    model = BertForMaskedLM(config)
    jitter(model)
    export_huggingface(model.eval(), tokenizer_file, SPECIALS, "wordpiece", True, tmp_path / "hf")
    theirs = getattr(transformers, architecture).from_pretrained(tmp_path / "hf").eval()
    assert logits_match(lambda ids, mask: model.head(model.encoder(ids, mask)), theirs, 120)


def test_layer_sharing_needs_post_norm_to_export(tmp_path: Path) -> None:
    model = BertForMaskedLM(EncoderConfig(**ALBERT, norm_placement="pre"))
    with pytest.raises(ValueError, match="norm_placement=pre has no AlbertForMaskedLM"):
        export_huggingface(model, tmp_path / "x", SPECIALS, "wordpiece", True, tmp_path / "hf")


def test_electra_generator_is_narrower_and_shares_the_embeddings() -> None:
    model = ElectraForPreTraining(EncoderConfig(**TINY), ElectraConfig())
    generator = model.generator.config
    assert (generator.hidden_size, generator.num_heads, generator.intermediate_size) == (16, 1, 32)
    assert generator.embedding_size == 64
    assert model.generator.encoder.embeddings is model.discriminator.embeddings
    assert model.generator.head.word_embeddings is model.discriminator.embeddings.word
    optimizer, _ = build_optimizer(model, OptimizerSettings(learning_rate=1e-3, warmup_steps=0))
    listed = [id(p) for group in optimizer.param_groups for p in group["params"]]
    assert len(listed) == len(set(listed)) == len(list(model.parameters()))


def test_samples_equal_to_the_original_count_as_original() -> None:
    torch.manual_seed(0)
    model = ElectraForPreTraining(EncoderConfig(**TINY), ElectraConfig()).eval()
    original = torch.full((2, 10), 7)
    original[1, 8:] = PAD  # neither scored nor attended to
    labels = torch.full_like(original, IGNORE_INDEX)
    labels[:, 2:5] = 7
    masked = torch.where(labels != IGNORE_INDEX, MASK_ID, original)
    attention_mask = (original != PAD).long()
    with torch.no_grad():
        model.generator.head.bias[7] = 1e4  # the generator always samples the original
        right = model(masked, labels, original, attention_mask)
        model.generator.head.bias[7], model.generator.head.bias[9] = 0.0, 1e4  # always wrong
        wrong = model(masked, labels, original, attention_mask)
    assert right.scored_tokens.item() == wrong.scored_tokens.item() == 18
    assert right.baseline_accuracy.item() == 1.0
    assert wrong.baseline_accuracy.item() == pytest.approx(12 / 18)


def test_electra_trains_past_the_all_original_baseline() -> None:
    torch.manual_seed(0)
    model = ElectraForPreTraining(EncoderConfig(**TINY), ElectraConfig())
    settings = OptimizerSettings(learning_rate=2e-3, warmup_steps=5, total_steps=30)
    optimizer, scheduler = build_optimizer(model, settings)
    # A 30% mask rate gives the discriminator twice the replaced tokens to learn from per step.
    collator = MaskingCollator(MaskingRule(mask_rate=0.3), VOCAB, MASK_ID, range(5), seed=0)
    data = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(30):
        batch = collator.mask(repeated_pairs(64, data), data)
        output = model(batch["input_ids"], batch["labels"], restore_original_ids(**batch))
        optimizer.zero_grad()
        output.loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(output.loss.item())
    assert sum(losses[-5:]) < 0.85 * sum(losses[:5])

    model.eval()
    held_out, sampler = torch.Generator().manual_seed(99), torch.Generator().manual_seed(3)
    accuracy = baseline = 0.0
    with torch.no_grad():
        for _ in range(4):
            batch = collator.mask(repeated_pairs(64, held_out), held_out)
            output = model(
                batch["input_ids"], batch["labels"], restore_original_ids(**batch), sampler=sampler
            )
            accuracy += output.discriminator_accuracy.item() / 4
            baseline += output.baseline_accuracy.item() / 4
    assert accuracy > baseline + 0.02


@pytest.mark.parametrize(("embedding_size", "share_layers"), [(16, False), (None, True)])
def test_electra_discriminator_export_loads_in_transformers_with_equal_logits(
    tmp_path: Path, embedding_size: int | None, share_layers: bool
) -> None:
    from transformers import ElectraForPreTraining as TransformersElectra

    torch.manual_seed(0)
    tokenizer_file = tiny_tokenizer(tmp_path / "tokenizer.json")
    config = EncoderConfig(
        **{**TINY, "vocab_size": 120, "embedding_size": embedding_size},
        share_layers=share_layers,
    )
    model = ElectraForPreTraining(config, ElectraConfig())
    jitter(model)
    export_huggingface(model.eval(), tokenizer_file, SPECIALS, "wordpiece", True, tmp_path / "hf")
    theirs = TransformersElectra.from_pretrained(tmp_path / "hf").eval()
    discriminator = model.discriminator
    assert logits_match(
        lambda ids, mask: model.discriminator_head(discriminator(ids, mask)), theirs, 120
    )


def test_safetensors_round_trip_keeps_weights_and_sharing(tmp_path: Path) -> None:
    torch.manual_seed(0)
    albert = BertForMaskedLM(EncoderConfig(**ALBERT))
    electra = ElectraForPreTraining(EncoderConfig(**ALBERT), ElectraConfig())
    jitter(albert)
    jitter(electra)
    (tmp_path / "albert").mkdir()
    (tmp_path / "electra").mkdir()
    save_masked_lm(albert, tmp_path / "albert")
    save_electra(electra, tmp_path / "electra")
    albert_loaded = load_masked_lm(tmp_path / "albert")
    electra_loaded = load_electra(tmp_path / "electra")

    for ours, theirs in ((albert, albert_loaded), (electra, electra_loaded)):
        loaded = theirs.state_dict()
        assert all(torch.equal(tensor, loaded[name]) for name, tensor in ours.state_dict().items())
    assert electra_loaded.generator.encoder.embeddings is electra_loaded.discriminator.embeddings
    assert albert_loaded.head.word_embeddings is albert_loaded.encoder.embeddings.word

    encoder = BertEncoder(EncoderConfig(**ALBERT))  # what fine-tuning wraps
    load_encoder_weights(encoder, tmp_path / "electra")
    ids = torch.randint(5, VOCAB, (2, 8))
    assert torch.equal(encoder.eval()(ids), electra.discriminator.eval()(ids))


def test_lightning_module_logs_losses_and_both_accuracies(tmp_path: Path) -> None:
    torch.manual_seed(0)
    collator = MaskingCollator(MaskingRule(), VOCAB, MASK_ID, range(5), seed=0)
    rows = list(repeated_pairs(16, torch.Generator().manual_seed(0)))
    module = ReplacedTokenDetectionModule(
        ElectraForPreTraining(EncoderConfig(**TINY), ElectraConfig()),
        OptimizerSettings(learning_rate=1e-3, total_steps=2, warmup_steps=0),
        ThroughputSettings(every_steps=1, flops_per_token=1.0),
    )
    trainer = pl.Trainer(
        max_steps=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    loader = DataLoader(rows, batch_size=8, collate_fn=collator)
    trainer.fit(module, loader, loader)
    metrics = trainer.callback_metrics
    for name in (
        "train/loss",
        "train/generator_loss",
        "train/discriminator_loss",
        "train/discriminator_accuracy",
        "train/baseline_accuracy",
        "val/loss",
        "val/discriminator_accuracy",
        "val/baseline_accuracy",
    ):
        assert torch.isfinite(metrics[name]), name
