"""What a checkpoint folder holds, from config.json alone: family, class, our encoder's shape.

Everything a run validates before any stage starts comes from here, without reading a weight.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_modules.models.config import EncoderConfig
from lightning_modules.transformers_import.config_json import encoder_settings
from lightning_modules.transformers_import.errors import CheckpointError
from lightning_modules.transformers_import.families import Family, family_of
from lightning_modules.transformers_import.weights import weight_files

CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class CheckpointShape:
    """A checkpoint as config.json describes it.

    `architecture` is the first of config.json's `architectures` (the family's bare model class
    when it names none); `hf_config` is config.json as read, the template an export writes back.
    """

    folder: Path
    model_type: str
    architecture: str
    config: EncoderConfig
    has_mlm_head: bool
    hf_config: dict[str, Any]
    weight_files: tuple[Path, ...]

    @property
    def family(self) -> Family:
        return family_of(self.model_type, str(self.folder / CONFIG_FILE))

    @property
    def has_discriminator_head(self) -> bool:
        return self.architecture == self.family.discriminator


def peek_checkpoint(folder: Path) -> CheckpointShape:
    """The checkpoint's shape from config.json, the weight files checked present but not read;
    a folder Cloze cannot import is a CheckpointError naming the file or key."""
    folder = Path(folder)
    hf = read_config(folder / CONFIG_FILE)
    return shape_of(hf, folder, weight_files(folder))


def shape_of(hf: dict[str, Any], folder: Path, files: tuple[Path, ...] = ()) -> CheckpointShape:
    """The shape config.json's contents `hf` describe (`folder` names it in errors): also how a
    continued model's export reads the base's config.json, kept after the folder is gone."""
    where = str(folder / CONFIG_FILE)
    family = family_of(hf.get("model_type"), where)
    architecture = architecture_of(hf, family, where)
    return CheckpointShape(
        folder=folder,
        model_type=family.model_type,
        architecture=architecture,
        config=encoder_settings(family, hf, architecture, where),
        has_mlm_head=architecture in (family.masked_lm, *family.pretraining),
        hf_config=hf,
        weight_files=files,
    )


def read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(
            f"{path.parent} has no {CONFIG_FILE}: not a transformers checkpoint folder "
            "(save_pretrained writes config.json beside the weights)"
        )
    try:
        hf = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{path} is not readable JSON ({error})") from None
    if not isinstance(hf, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return hf


def architecture_of(hf: dict[str, Any], family: Family, where: str) -> str:
    """config.json's class, one Cloze reads (task heads beyond MLM and ELECTRA's are refused:
    their tensors would be silently dropped)."""
    architectures = hf.get("architectures") or [family.bare]
    architecture = architectures[0]
    if architecture not in family.architectures:
        raise CheckpointError(
            f"{where}: architectures={architectures} is not supported; Cloze imports "
            f"{', '.join(family.architectures)}"
        )
    return str(architecture)
