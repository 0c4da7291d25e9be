"""The one error a checkpoint that cannot be imported (or exported back) raises."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A one-line message naming the folder, file or key at fault and what to do about it."""
