"""A checkpoint's weight files: which there are, their tensors (memory-mapped, not copied), and
the hash of their bytes that names the checkpoint in lineage and artifact keys.

`transformers` writes `model.safetensors`, or shards listed in `model.safetensors.index.json`;
older checkpoints are `pytorch_model.bin` (read with `weights_only=True`: a pickle runs no code),
possibly sharded the same way.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from lightning_modules.transformers_import.errors import CheckpointError

Tensors = dict[str, torch.Tensor]
# In the order `transformers` prefers them.
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
CHUNK = 1 << 24  # bytes hashed per read


def weight_files(folder: Path) -> tuple[Path, ...]:
    """The files holding the weights (the shards an index lists, sorted), all present."""
    for name in WEIGHT_FILES:
        path = folder / name
        if path.is_file():
            return shard_files(path) if name.endswith(".index.json") else (path,)
    raise CheckpointError(
        f"{folder} has no weights: expected one of {', '.join(WEIGHT_FILES)} beside config.json"
    )


def shard_files(index: Path) -> tuple[Path, ...]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        names = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(f"{index} is not a readable shard index ({error})") from None
    missing = [name for name in names if not (index.parent / name).is_file()]
    if missing:
        raise CheckpointError(f"{index} lists shards that are missing: {', '.join(missing[:3])}")
    return tuple(index.parent / name for name in names)


def read_tensors(files: tuple[Path, ...]) -> Tensors:
    """Every tensor of every file, by name; safetensors and recent .bin files stay mapped from
    disk, so only the pages a tensor's use touches are read."""
    tensors: Tensors = {}
    for path in files:
        tensors.update(read_safetensors(path) if path.suffix == ".safetensors" else read_bin(path))
    return tensors


def read_safetensors(path: Path) -> Tensors:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise CheckpointError(f"{path} is not a readable safetensors file ({error})") from None


def read_bin(path: Path) -> Tensors:
    """A pickled state dict, memory-mapped where its format allows (the zip format of torch 1.6
    on; earlier files are read whole)."""
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as error:
            if "mmap" not in str(error):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises a variety: unpickling, zip, storage errors
        raise CheckpointError(
            f"{path} is not a readable PyTorch state dict ({str(error).splitlines()[0]}); "
            "convert it to model.safetensors"
        ) from None
    if not isinstance(state, dict) or not all(
        isinstance(tensor, torch.Tensor) for tensor in state.values()
    ):
        raise CheckpointError(f"{path} does not hold a state dict of tensors")
    return state


def weights_sha256(files: tuple[Path, ...]) -> str:
    """sha256 of the files' bytes, one after the other in `files`' order."""
    digest = hashlib.sha256()
    for path in files:
        with path.open("rb") as stream:
            while chunk := stream.read(CHUNK):
                digest.update(chunk)
    return digest.hexdigest()
