"""A model continued from an imported checkpoint, written back as the checkpoint's own class.

config.json starts from the base's (token ids, `architectures`, `model_type` and whatever else it
says stay), with our shape written over it through the family's own keys; the result is read back
as an import would read it, and anything it would not give back as the same encoder is refused.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from lightning_modules.export import discriminator_tensors
from lightning_modules.hf_layouts import Tensors, head_tensors
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.electra import ElectraForPreTraining
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.transformers_import.config_json import encoder_settings, hf_settings
from lightning_modules.transformers_import.errors import CheckpointError
from lightning_modules.transformers_import.mapping import encoder_for_export
from lightning_modules.transformers_import.shape import CheckpointShape

TRAINING_ONLY = ("document_attention",)  # no `transformers` class has it; inference ignores it


def export_like(
    model: BertForMaskedLM | ElectraForPreTraining, base: CheckpointShape
) -> tuple[Tensors, dict[str, Any]]:
    """Tensors and config.json of `model` as `base`'s `transformers` class, so that an import
    followed by this, with no training step, gives `transformers` the same logits.

    A masked LM exports as the family's masked LM: the base's class when it is one, else (a bare
    encoder, BertForPreTraining or AlbertForPreTraining, whose NSP/SOP heads were not imported,
    or an ELECTRA discriminator continued as a masked LM) the family's `...ForMaskedLM`, e.g.
    ElectraForMaskedLM. An `ElectraForPreTraining` model exports its discriminator, and only as
    a base that was one. What the class cannot represent is a CheckpointError.
    """
    family = base.family
    if isinstance(model, ElectraForPreTraining):
        if not base.has_discriminator_head:
            raise CheckpointError(
                f"an ELECTRA model exports as ElectraForPreTraining, but the base checkpoint "
                f"{base.folder} is a {base.architecture}; continue it as a masked LM instead"
            )
        architecture, tensors = base.architecture, discriminator_tensors(model)
    else:
        architecture = family.masked_lm
        tensors = {
            **encoder_for_export(family.model_type, model.encoder),
            **head_tensors(model.head, family.model_type, model.config),
        }
    settings = hf_settings(family, model.config)
    hf = {**base.hf_config, **settings, "architectures": [architecture], "dtype": "float32"}
    hf.pop("torch_dtype", None)  # the older spelling of `dtype`; ours are fp32 tensors
    check_representable(hf, base, architecture, model.config)
    return tensors, hf


def check_representable(
    hf: dict[str, Any], base: CheckpointShape, architecture: str, config: EncoderConfig
) -> None:
    """config.json read back must give `config` (training-only options aside)."""
    where = f"export as {architecture} (base {base.folder})"
    read_back = encoder_settings(base.family, hf, architecture, where)
    differ = [
        f"model.{field.name}={getattr(config, field.name)!r} ({architecture} would give "
        f"{getattr(read_back, field.name)!r})"
        for field in fields(EncoderConfig)
        if field.name not in TRAINING_ONLY
        and getattr(config, field.name) != getattr(read_back, field.name)
    ]
    if differ:
        raise CheckpointError(f"{where}: the class cannot represent {'; '.join(differ)}")
