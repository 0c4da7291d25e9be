"""An arm fitted once per store: a task's random-init control, or a continued checkpoint's base.

Neither depends on the pretrained weights of the run that asks for it, so the stage keys each
under what its runs do depend on (flows/stages/control_arm.py) and every run with the same key
reads the one published arm instead of fitting it again. The stage does the keying; the fitting
and the reading back happen here, so a task's evaluation goes down into the downstream package
once and never calls back up into the stage.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.downstream.finetuning.recipe import TaskRun, evaluate_arm
from flows.downstream.finetuning.results import ArmResult

ARM_FILE = "arm.json"  # the ArmResult, every run's test predictions included (bootstrap input)


@dataclass(frozen=True)
class CachedArm:
    """Where one arm of one task is published: `arm` is what it is fitted as (its grid and the
    weights it starts from), `stage` and `key` the artifact, `record` what the key was made of."""

    arm: str
    store: ArtifactStore
    stage: str
    key: str
    record: dict[str, Any]

    def result(self, task_run: TaskRun, seeds: list[int]) -> ArmResult:
        """The published arm; fitted over `seeds` first when no run of the same key has been."""

        def build(directory: Path) -> dict[str, Any]:
            run = replace(task_run, work_dir=self.store.work_dir(self.stage, self.key))
            result = evaluate_arm(run, self.arm, seeds)
            (directory / ARM_FILE).write_text(json.dumps(asdict(result)))
            return {"task": task_run.spec.name, "learning_rate": result.learning_rate}

        return read_arm(self.store.get_or_build(self.stage, self.key, build, self.record))


def read_arm(ref: ArtifactRef) -> ArmResult:
    return ArmResult.from_record(json.loads((ref.path / ARM_FILE).read_text()))
