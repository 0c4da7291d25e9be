"""What Cloze cannot import, or export back, is refused on one line naming the file or key and
what to do; nothing is dropped or guessed silently."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from lightning_modules.models.config import ElectraConfig
from lightning_modules.models.electra import ElectraForPreTraining
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.transformers_import import (
    SUPPORTED_MODEL_TYPES,
    CheckpointError,
    export_like,
    peek_checkpoint,
    read_checkpoint,
)
from lightning_modules.transformers_import.families import FAMILIES
from tests.checkpoints import tiny_checkpoint


def edit_config(folder: Path, **changes: Any) -> Path:
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**hf, **changes}))
    return folder


def edit_weights(folder: Path, drop: str = "", **extra: torch.Tensor) -> Path:
    state = load_file(folder / "model.safetensors")
    state.pop(drop, None)
    save_file({**state, **extra}, str(folder / "model.safetensors"))
    return folder


def bert(folder: Path, **options: Any) -> Path:
    return tiny_checkpoint("bert", folder, scale=0, **options)


def without_weights(folder: Path) -> Path:
    (bert(folder) / "model.safetensors").unlink()
    return folder


def damaged_weights(folder: Path) -> Path:
    (bert(folder) / "model.safetensors").write_bytes(b"\x00" * 16)
    return folder


Broken = Callable[[Path], Path]
REFUSED: list[tuple[Broken, str]] = [
    (
        lambda d: edit_config(bert(d), model_type="deberta-v2"),
        r"config\.json: model_type='deberta-v2' is not supported; Cloze imports "
        + ", ".join(SUPPORTED_MODEL_TYPES)
        + "$",
    ),
    (lambda d: d, r"has no config\.json: not a transformers checkpoint folder"),
    (
        without_weights,
        r"has no weights: expected one of model\.safetensors, model\.safetensors\.index\.json, "
        r"pytorch_model\.bin",
    ),
    (
        lambda d: edit_config(bert(d), hidden_act="relu"),
        r"config\.json: hidden_act='relu' is not an activation Cloze's encoder has; it has gelu, ",
    ),
    (
        lambda d: tiny_checkpoint("albert", d, scale=0, num_hidden_groups=2),
        r"num_hidden_groups=2 is not supported: Cloze shares one block across layers",
    ),
    (
        lambda d: tiny_checkpoint("albert", d, scale=0, inner_group_num=2),
        r"inner_group_num=2 is not supported",
    ),
    (
        lambda d: edit_config(bert(d), position_embedding_type="relative_key"),
        r"position_embedding_type='relative_key' is not supported: Cloze's positions are absolute",
    ),
    (
        lambda d: tiny_checkpoint("roberta", d, scale=0, hidden_act="gelu_new"),
        r"hidden_act='gelu_new' is not supported: RoBERTa's MLM head applies erf gelu",
    ),
    (
        lambda d: edit_config(bert(d), architectures=["BertForSequenceClassification"]),
        r"architectures=\['BertForSequenceClassification'\] is not supported; Cloze imports "
        r"BertForMaskedLM, BertForPreTraining, BertModel$",
    ),
    (
        lambda d: edit_config(
            tiny_checkpoint("modernbert", d, scale=0),
            layer_types=["full_attention", "full_attention", "sliding_attention"],
        ),
        r"layer_types=\[.*\] is not supported: Cloze attends globally in every n-th layer",
    ),
    (
        lambda d: tiny_checkpoint("roformer", d, scale=0, rotary_value=True),
        r"rotary_value=True is not supported: Cloze rotates queries and keys, not values",
    ),
    (
        lambda d: edit_config(bert(d), hidden_size=30),
        r"config\.json: model\.hidden_size=30 is not divisible by model\.num_heads=4",
    ),
    (
        lambda d: edit_weights(bert(d), **{"bert.extra.weight": torch.zeros(2)}),
        r"model\.safetensors: tensors that are not part of a BertForMaskedLM Cloze imports: "
        r"bert\.extra\.weight$",
    ),
    (
        lambda d: edit_weights(bert(d), drop="bert.encoder.layer.1.output.dense.weight"),
        r"model\.safetensors: BertForMaskedLM tensors missing: "
        r"bert\.encoder\.layer\.1\.output\.dense\.weight$",
    ),
    (damaged_weights, r"model\.safetensors is not a readable safetensors file"),
    (
        lambda d: tiny_checkpoint("albert", d, embedding_size=32),
        r"embedding_hidden_mapping_in is not the identity while embedding_size == hidden_size",
    ),
]


@pytest.mark.parametrize(
    ("broken", "message"),
    REFUSED,
    ids=[
        "deberta-v2",
        "no-config",
        "no-weights",
        "relu",
        "albert-groups",
        "albert-inner-layers",
        "relative-positions",
        "roberta-tanh-gelu",
        "task-head",
        "modernbert-layer-types",
        "rotary-values",
        "shape",
        "unexpected-tensor",
        "missing-tensor",
        "damaged-weights",
        "albert-equal-widths",
    ],
)
def test_a_checkpoint_cloze_cannot_import_is_refused_naming_what(
    broken: Broken, message: str, tmp_path: Path
) -> None:
    folder = broken(tmp_path / "hf")
    with pytest.raises(CheckpointError, match=message) as refused:
        read_checkpoint(folder)
    assert "\n" not in str(refused.value)
    assert str(folder) in str(refused.value)


def test_an_electra_pair_exports_only_like_a_discriminator(tmp_path: Path) -> None:
    shape = peek_checkpoint(bert(tmp_path / "hf"))
    model = ElectraForPreTraining(shape.config, ElectraConfig())
    with pytest.raises(CheckpointError, match=r"base checkpoint .* is a BertForMaskedLM"):
        export_like(model, shape)


@pytest.mark.parametrize(
    ("change", "lacks"),
    [
        (
            {"norm_placement": "pre"},
            r"model\.norm_placement='pre' \(BertForMaskedLM would give 'post'\)",
        ),
        ({"position_embedding": "rotary"}, r"model\.position_embedding='rotary'"),
        (
            {"layer_norm_eps": 1e-5},
            r"model\.layer_norm_eps=1e-05 \(DistilBertForMaskedLM would give 1e-12\)",
        ),
    ],
)
def test_a_model_its_base_class_cannot_hold_is_refused_naming_the_options(
    change: dict[str, Any], lacks: str, tmp_path: Path
) -> None:
    model_type = "distilbert" if "layer_norm_eps" in change else "bert"
    shape = peek_checkpoint(tiny_checkpoint(model_type, tmp_path / "hf", scale=0))
    model = BertForMaskedLM(replace(shape.config, **change))
    with pytest.raises(CheckpointError, match=f"the class cannot represent {lacks}"):
        export_like(model, shape)


def test_a_tanh_gelu_masked_lm_cannot_export_as_electras_masked_lm(tmp_path: Path) -> None:
    shape = peek_checkpoint(
        tiny_checkpoint("electra", tmp_path / "hf", scale=0, architecture="ElectraForPreTraining")
    )
    model = BertForMaskedLM(replace(shape.config, activation="gelu_tanh"))
    with pytest.raises(CheckpointError, match=r"ELECTRA's generator head applies erf gelu"):
        export_like(model, shape)


@pytest.mark.parametrize("model_type", SUPPORTED_MODEL_TYPES)
def test_each_familys_defaults_are_its_transformers_config_classs(model_type: str) -> None:
    """A config.json that leaves a key out means the class default: ours must be that."""
    import transformers

    from tests.checkpoints import CLASSES

    theirs = getattr(transformers, CLASSES[model_type][0])().to_dict()
    defaults = FAMILIES[model_type].defaults
    spelled_now = {key: value for key, value in defaults.items() if key in theirs}
    assert spelled_now == {key: theirs[key] for key in spelled_now}
    legacy = set(defaults) - set(spelled_now)  # read from older config.json files only
    assert legacy <= {"global_attn_every_n_layers", "global_rope_theta", "local_rope_theta"}
