"""Typed stage outputs: a manifest's flat `outputs` JSON, read through attributes.

The manifest keeps its flat JSON (stores on disk keep loading, and MLflow logs it as metrics as it
is); code that reads a stage's figures goes through the stage's dataclass, so a renamed or
missing figure is a type error or one clear message, not a KeyError deep in a report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, ClassVar, Self

from flows.core.artifacts import ArtifactRef


@dataclass(frozen=True)
class StageOutputs:
    """Base of each stage's outputs; subclasses are frozen dataclasses naming their `STAGE`."""

    STAGE: ClassVar[str]

    def to_manifest(self) -> dict[str, Any]:
        """The flat JSON object the stage's manifest records under `outputs`."""
        return asdict(self)

    @classmethod
    def from_manifest(cls, outputs: Mapping[str, Any]) -> Self:
        """Reads the fields this class names; other keys (path, cache_hit, ...) are ignored."""
        required = [
            item.name
            for item in fields(cls)
            if item.default is MISSING and item.default_factory is MISSING
        ]
        missing = [name for name in required if name not in outputs]
        if missing:
            raise ValueError(
                f"{cls.STAGE} outputs lack {missing} (have {sorted(outputs)}); the artifact was "
                "written by another version of the stage"
            )
        names = {item.name for item in fields(cls)}
        return cls(**{name: value for name, value in outputs.items() if name in names})

    @classmethod
    def of(cls, ref: ArtifactRef) -> Self:
        """The typed outputs of a published artifact of this stage."""
        if ref.stage != cls.STAGE:
            raise ValueError(f"{ref.path} is a {ref.stage} artifact, not {cls.STAGE}")
        return cls.from_manifest(ref.outputs)
