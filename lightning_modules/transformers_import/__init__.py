"""Import `transformers` checkpoints into Cloze's own encoder, exactly, and export a continued
model back to the same `transformers` class. Pure torch, safetensors and json: `transformers`
itself is needed only to make the checkpoints, never to read or write them."""

from lightning_modules.transformers_import.errors import CheckpointError
from lightning_modules.transformers_import.export_like import export_like
from lightning_modules.transformers_import.families import SUPPORTED_MODEL_TYPES
from lightning_modules.transformers_import.read_weights import ImportedCheckpoint, read_checkpoint
from lightning_modules.transformers_import.shape import CheckpointShape, peek_checkpoint, shape_of

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "CheckpointError",
    "CheckpointShape",
    "ImportedCheckpoint",
    "export_like",
    "peek_checkpoint",
    "read_checkpoint",
    "shape_of",
]
