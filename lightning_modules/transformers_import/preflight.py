"""Whether a checkpoint's weights are whole and agree with its config.json, read from the files'
headers: before any stage runs, not after a tokenizer has been imported.

A safetensors file starts with an 8-byte header length and a JSON header that lists every
tensor's dtype, shape and byte range: a truncated file ends before its last range, and a
config.json that contradicts the weights (`hidden_size` 256 against a 384-wide table) shows as a
shape that differs from the one our encoder of that config.json would hold. No tensor is read.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from lightning_modules.hf_layouts import encoder_layout
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.transformers_import.config_json import position_offset
from lightning_modules.transformers_import.errors import CheckpointError
from lightning_modules.transformers_import.mapping import normalised
from lightning_modules.transformers_import.read_weights import Unfilled, listed
from lightning_modules.transformers_import.shape import CheckpointShape
from lightning_modules.transformers_import.weights import read_bin

Shapes = dict[str, tuple[int, ...]]
HEADER_LENGTH = 8  # bytes: a little-endian u64, the JSON header's size
ROBERTA_POSITIONS = "roberta.embeddings.position_embeddings.weight"


def safetensors_shapes(path: Path) -> Shapes:
    """Each tensor's shape from the header; a file shorter than its header says is refused."""
    size = path.stat().st_size
    try:
        with path.open("rb") as stream:
            (length,) = struct.unpack("<Q", stream.read(HEADER_LENGTH))
            if HEADER_LENGTH + length > size:
                raise ValueError(f"its header claims {length} bytes of a {size}-byte file")
            header = json.loads(stream.read(length))
        entries = {name: entry for name, entry in header.items() if name != "__metadata__"}
        end = max((entry["data_offsets"][1] for entry in entries.values()), default=0)
        shapes = {name: tuple(int(n) for n in entry["shape"]) for name, entry in entries.items()}
    except (OSError, struct.error, ValueError, KeyError, TypeError, IndexError) as error:
        raise CheckpointError(f"{path} is not a readable safetensors file ({error})") from None
    if HEADER_LENGTH + length + end > size:
        raise CheckpointError(
            f"{path} is truncated: its header lists {HEADER_LENGTH + length + end} bytes, the "
            f"file holds {size}; download it again"
        )
    return shapes


def weight_shapes(files: tuple[Path, ...]) -> Shapes:
    """Every tensor's shape; a .bin file has no header, so it is mapped from disk (not read)."""
    shapes: Shapes = {}
    for path in files:
        if path.suffix == ".safetensors":
            shapes |= safetensors_shapes(path)
        else:
            shapes |= {name: tuple(tensor.shape) for name, tensor in read_bin(path).items()}
    return shapes


def expected_shapes(shape: CheckpointShape) -> Shapes:
    """Our encoder's tensor shapes for config.json, allocated but never filled."""
    with Unfilled():
        encoder = BertEncoder(shape.config)
    return {name: tuple(tensor.shape) for name, tensor in encoder.state_dict().items()}


def check_weights(shape: CheckpointShape) -> None:
    """A CheckpointError unless every encoder tensor config.json implies is in the weights, whole,
    with the shape config.json implies (fused projections: their parts stacked)."""
    family, config = shape.family, shape.config
    theirs = normalised(weight_shapes(shape.weight_files), family)
    ours = expected_shapes(shape)
    missing, contradicted = [], []
    for our_name, names in encoder_layout(family.model_type, config):
        found: list[tuple[int, ...]] = [theirs[name] for name in names if name in theirs]
        if len(found) < len(names):
            missing += [name for name in names if name not in theirs]
            continue
        rows = sum(part[0] for part in found) if found[0] else 0
        if names[0] == ROBERTA_POSITIONS:  # rows 0 .. pad are never read (mapping.py)
            rows -= position_offset(config.pad_token_id)
        stacked = (rows, *found[0][1:]) if found[0] else ()
        if stacked != ours[our_name]:
            contradicted.append(f"{names[0]} is {list(stacked)}, not {list(ours[our_name])}")
    where = shape.weight_files[0] if len(shape.weight_files) == 1 else shape.folder
    if contradicted:
        raise CheckpointError(
            f"{shape.folder / 'config.json'} contradicts {where}: {listed(contradicted)} (the "
            "shape config.json describes); the files do not belong together"
        )
    if missing:
        raise CheckpointError(
            f"{where}: {shape.architecture} tensors config.json describes are missing: "
            f"{listed(missing)}"
        )
