"""A `transformers` checkpoint of every family imports into our encoder with the same logits,
and exports back to the same class with the same logits again.

The checkpoints are built offline by tests/checkpoints.py with weights redrawn at std 0.5 and
random norms, so logits reach about 10 and a misplaced tensor moves them by far more than 1e-4.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from lightning_modules.export import write_weights
from lightning_modules.models.config import ElectraConfig
from lightning_modules.models.electra import ElectraForPreTraining
from lightning_modules.transformers_import import (
    ImportedCheckpoint,
    export_like,
    peek_checkpoint,
    read_checkpoint,
)
from tests.checkpoints import tiny_checkpoint

ATOL = 1e-4
FAMILIES = [
    pytest.param(("bert", {}), id="bert"),
    pytest.param(("bert", {"tie_word_embeddings": False}), id="bert-untied"),
    pytest.param(("roberta", {}), id="roberta"),
    pytest.param(("xlm-roberta", {}), id="xlm-roberta"),
    pytest.param(("electra", {}), id="electra-generator"),
    pytest.param(("albert", {}), id="albert"),
    pytest.param(("distilbert", {}), id="distilbert"),
    pytest.param(("distilbert", {"sinusoidal_pos_embds": True}), id="distilbert-sinusoidal"),
    pytest.param(("modernbert", {}), id="modernbert"),
    pytest.param(("modernbert", {"decoder_bias": False}), id="modernbert-no-output-bias"),
    pytest.param(("roformer", {}), id="roformer"),
]


def padded_batch(pad_token_id: int, vocab_size: int = 99) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of 16 tokens, the second right-padded after 11 (pad ids under mask 0)."""
    ids = torch.randint(5, vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    ids[1, 11:] = pad_token_id
    return ids, mask


def assert_same_at_tokens(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor) -> None:
    """Equal within ATOL where the mask is 1 (padding's outputs are masked out downstream)."""
    real = mask.bool()
    torch.testing.assert_close(ours[real], theirs[real], atol=ATOL, rtol=0)


def our_logits(imported: ImportedCheckpoint, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    model = imported.masked_lm().eval()
    with torch.no_grad():
        return model.head(model.encoder(ids, mask))


def their_logits(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=ids, attention_mask=mask).logits


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A tiny checkpoint folder and `transformers`' own model loaded from it."""
    from transformers import AutoModelForMaskedLM

    model_type, options = request.param
    folder = tiny_checkpoint(model_type, tmp_path_factory.mktemp(model_type) / "hf", **options)
    return folder, AutoModelForMaskedLM.from_pretrained(folder)


def test_each_familys_logits_equal_transformers(family: tuple[Path, Any]) -> None:
    folder, theirs = family
    imported = read_checkpoint(folder)
    ids, mask = padded_batch(imported.shape.config.pad_token_id)
    reference = their_logits(theirs, ids, mask)
    assert reference[mask.bool()].abs().max() > 3  # large logits: a wrong tensor would show
    assert_same_at_tokens(our_logits(imported, ids, mask), reference, mask)


def test_an_import_exported_like_its_base_loads_as_the_same_class_with_equal_logits(
    family: tuple[Path, Any], tmp_path: Path
) -> None:
    from transformers import AutoModelForMaskedLM

    folder, theirs = family
    imported = read_checkpoint(folder)
    tensors, config = export_like(imported.masked_lm(), imported.shape)
    write_weights(tensors, config, tmp_path)
    exported, loading = AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert type(exported) is type(theirs)
    assert not any(loading.values())  # nothing missing, unexpected or mismatched
    ids, mask = padded_batch(imported.shape.config.pad_token_id)
    assert_same_at_tokens(their_logits(exported, ids, mask), their_logits(theirs, ids, mask), mask)


def test_the_import_keeps_the_checkpoints_tying(family: tuple[Path, Any]) -> None:
    imported = read_checkpoint(family[0])
    model = imported.masked_lm()
    tied = model.head.word_embeddings is model.encoder.embeddings.word
    assert tied == imported.shape.config.tie_word_embeddings
    assert ("word_embeddings.weight" in (imported.mlm_head or {})) != tied


@pytest.fixture(scope="module")
def discriminator(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("electra") / "discriminator"
    return tiny_checkpoint("electra", folder, architecture="ElectraForPreTraining")


def electra_from(imported: ImportedCheckpoint) -> ElectraForPreTraining:
    """Our ELECTRA pair with the imported discriminator (the generator stays fresh)."""
    assert imported.discriminator_head is not None
    model = ElectraForPreTraining(imported.shape.config, ElectraConfig())
    model.discriminator.load_state_dict(imported.encoder)
    model.discriminator_head.load_state_dict(imported.discriminator_head)
    return model.eval()


def test_an_electra_discriminators_replaced_token_logits_equal_transformers(
    discriminator: Path,
) -> None:
    from transformers import ElectraForPreTraining as TheirElectra

    imported = read_checkpoint(discriminator)
    assert imported.mlm_head is None and not imported.shape.has_mlm_head
    ids, mask = padded_batch(imported.shape.config.pad_token_id)
    encoder, head = imported.masked_lm().encoder.eval(), imported.replaced_token_head().eval()
    with torch.no_grad():
        ours = head(encoder(ids, mask))
    theirs = their_logits(TheirElectra.from_pretrained(discriminator), ids, mask)
    assert theirs[mask.bool()].abs().max() > 3
    assert_same_at_tokens(ours, theirs, mask)


def test_a_discriminator_exports_back_as_electra_for_pre_training(
    discriminator: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForPreTraining

    imported = read_checkpoint(discriminator)
    tensors, config = export_like(electra_from(imported), imported.shape)
    write_weights(tensors, config, tmp_path)
    exported = AutoModelForPreTraining.from_pretrained(tmp_path)
    assert type(exported).__name__ == "ElectraForPreTraining"
    ids, mask = padded_batch(imported.shape.config.pad_token_id)
    original = AutoModelForPreTraining.from_pretrained(discriminator)
    assert_same_at_tokens(
        their_logits(exported, ids, mask), their_logits(original, ids, mask), mask
    )


def test_a_discriminator_continued_as_a_masked_lm_exports_as_electra_for_masked_lm(
    discriminator: Path, tmp_path: Path
) -> None:
    """The discriminator has no MLM head: ours starts fresh, and ELECTRA's masked LM class
    holds it (the generator's class, at the discriminator's shape)."""
    from transformers import AutoModelForMaskedLM

    imported = read_checkpoint(discriminator)
    model = imported.masked_lm().eval()
    tensors, config = export_like(model, imported.shape)
    write_weights(tensors, config, tmp_path)
    exported, loading = AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert type(exported).__name__ == config["architectures"][0] == "ElectraForMaskedLM"
    assert not any(loading.values())
    ids, mask = padded_batch(imported.shape.config.pad_token_id)
    with torch.no_grad():
        ours = model.head(model.encoder(ids, mask))
    assert_same_at_tokens(ours, their_logits(exported, ids, mask), mask)


@pytest.mark.parametrize("weights", ["bin", "sharded"])
def test_pytorch_bin_and_sharded_safetensors_import_alike(weights: str, tmp_path: Path) -> None:
    single = read_checkpoint(tiny_checkpoint("bert", tmp_path / "single"))
    other = read_checkpoint(tiny_checkpoint("bert", tmp_path / weights, weights=weights))
    names = [path.name for path in other.shape.weight_files]
    assert names == ["pytorch_model.bin"] if weights == "bin" else len(names) > 1
    for ours, theirs in ((single.encoder, other.encoder), (single.mlm_head, other.mlm_head)):
        assert ours is not None and theirs is not None
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[name], theirs[name]) for name in ours)


def test_a_bare_bert_model_imports_with_no_head(tmp_path: Path) -> None:
    from transformers import BertModel

    folder = tiny_checkpoint("bert", tmp_path / "bare", architecture="BertModel")
    imported = read_checkpoint(folder)
    assert not imported.shape.has_mlm_head and imported.mlm_head is None
    encoder = imported.masked_lm().encoder.eval()
    ids, mask = padded_batch(0)
    with torch.no_grad():
        ours = encoder(ids, mask)
        theirs = BertModel.from_pretrained(folder).eval()(input_ids=ids, attention_mask=mask)
    assert_same_at_tokens(ours, theirs.last_hidden_state, mask)


def test_bert_for_pre_training_imports_past_its_pooler_and_next_sentence_head(
    tmp_path: Path,
) -> None:
    from transformers import BertForPreTraining

    folder = tiny_checkpoint("bert", tmp_path / "pre", architecture="BertForPreTraining")
    assert "cls.seq_relationship.weight" in load_file(folder / "model.safetensors")
    imported = read_checkpoint(folder)
    ids, mask = padded_batch(0)
    with torch.no_grad():
        theirs = BertForPreTraining.from_pretrained(folder).eval()(ids, mask).prediction_logits
    assert_same_at_tokens(our_logits(imported, ids, mask), theirs, mask)
    # NSP is not imported: the continued model is a masked LM.
    assert export_like(imported.masked_lm(), imported.shape)[1]["architectures"] == [
        "BertForMaskedLM"
    ]


def test_legacy_gamma_beta_names_and_saved_buffers_import(tmp_path: Path) -> None:
    """TF-era BERT files name LayerNorm parameters gamma/beta and keep position_ids."""
    folder = tiny_checkpoint("bert", tmp_path / "new")
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "config.json").write_text((folder / "config.json").read_text())
    state = {
        name.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta"
        ): tensor
        for name, tensor in load_file(folder / "model.safetensors").items()
    }
    state["bert.embeddings.position_ids"] = torch.arange(64)[None]
    torch.save(state, legacy / "pytorch_model.bin")
    new, old = read_checkpoint(folder), read_checkpoint(legacy)
    assert all(torch.equal(new.encoder[name], old.encoder[name]) for name in new.encoder)


def test_modernbert_reads_its_hub_config_spelling_alike(tmp_path: Path) -> None:
    """answerdotai/ModernBERT-base's config.json predates `layer_types` and `rope_parameters`."""
    folder = tiny_checkpoint("modernbert", tmp_path / "hf")
    hf = json.loads((folder / "config.json").read_text())
    current = peek_checkpoint(folder).config
    rope = hf.pop("rope_parameters")
    hf.pop("layer_types")
    hf |= {
        "global_attn_every_n_layers": 2,
        "global_rope_theta": rope["full_attention"]["rope_theta"],
        "local_rope_theta": rope["sliding_attention"]["rope_theta"],
    }
    (folder / "config.json").write_text(json.dumps(hf))
    assert peek_checkpoint(folder).config == current
    assert current.global_attention_every == 2 and current.rope_theta == 160_000.0


def test_peek_reads_config_json_only_and_the_hash_is_the_files(tmp_path: Path) -> None:
    folder = tiny_checkpoint("bert", tmp_path / "hf")
    weights = (folder / "model.safetensors").read_bytes()
    assert read_checkpoint(folder).weights_sha256 == hashlib.sha256(weights).hexdigest()
    (folder / "model.safetensors").write_bytes(b"not weights")
    assert peek_checkpoint(folder).config.hidden_size == 32


def test_untied_output_embeddings_keep_their_own_weights(tmp_path: Path) -> None:
    folder = tiny_checkpoint("bert", tmp_path / "hf", tie_word_embeddings=False)
    model = read_checkpoint(folder).masked_lm()
    decoder, table = model.head.word_embeddings.weight, model.encoder.embeddings.word.weight
    assert not torch.equal(decoder, table)
    stored = load_file(folder / "model.safetensors")
    assert torch.equal(decoder, stored["cls.predictions.decoder.weight"])
    assert torch.equal(model.head.bias, stored["cls.predictions.decoder.bias"])


def test_a_tied_config_whose_decoder_copy_differs_is_refused(tmp_path: Path) -> None:
    from lightning_modules.transformers_import import CheckpointError

    folder = tiny_checkpoint("bert", tmp_path / "hf", tie_word_embeddings=False)
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**hf, "tie_word_embeddings": True}))
    with pytest.raises(CheckpointError, match=r"cls.predictions.decoder.weight differs from"):
        read_checkpoint(folder)
