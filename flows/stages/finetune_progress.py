"""A finetune stage's finished tasks, kept until the stage publishes.

A stage fine-tunes its tasks one after another (hours for several GLUE tasks); stopped mid-way
(Ctrl-C, a kill, a crash), it must not lose the finished ones. Each finished task's figures,
record and test predictions go into the stage's work directory, which belongs to the stage's
key: the rerun of the same key restores them instead of training those tasks again, so a stop
loses at most the task in progress. The work directory is removed when the artifact is published.
`evaluate_tasks` is that walk over a stage's tasks (the finetune stage's and `cloze evaluate`'s):
each one restored, or evaluated by one call down into flows/downstream/evaluate.py and kept.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flows.core.artifacts import replace_json
from flows.downstream.evaluate import Sources, evaluate_task
from flows.downstream.finetuning.cached_arm import CachedArm
from flows.downstream.settings import FinetuneSettings, TaskPlan

log = logging.getLogger(__name__)
FINISHED_DIR = "finished-tasks"


@dataclass(frozen=True)
class FinishedTasks:
    """`<work dir>/finished-tasks/<task>.json`, one per task the stage has finished."""

    directory: Path

    @classmethod
    def in_work_dir(cls, work_dir: Path) -> FinishedTasks:
        return cls(work_dir / FINISHED_DIR)

    def restore(
        self, task: str, outputs: dict[str, Any], runs: dict[str, Any], predictions: dict[str, Any]
    ) -> bool:
        """Adds a finished task's results to the stage's; False when it has none (or a file
        that cannot be read: the task is then trained again)."""
        path = self.directory / f"{task}.json"
        try:
            saved = json.loads(path.read_text())
            task_outputs, record, predicted = (
                saved["outputs"],
                saved["record"],
                saved["predictions"],
            )
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("finetune: %s is unreadable (%s); task %s runs again", path, error, task)
            return False
        outputs.update(task_outputs)
        runs[task] = record
        predictions[task] = predicted
        log.info("finetune: task %s restored, finished by a run of this stage that stopped", task)
        return True

    def keep(
        self, task: str, outputs: dict[str, Any], runs: dict[str, Any], predictions: dict[str, Any]
    ) -> None:
        """Saves what the stage holds of `task` (its `<task>.` outputs, record, predictions)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        mine = {key: value for key, value in outputs.items() if key.startswith(f"{task}.")}
        saved = {"outputs": mine, "record": runs[task], "predictions": predictions[task]}
        replace_json(self.directory / f"{task}.json", saved)


def evaluate_tasks(
    settings: FinetuneSettings,
    sources: Sources,
    cached: Callable[[TaskPlan], Mapping[str, CachedArm]],
    outputs: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each task evaluated (one call down per task), with the arms the store keeps for it
    (`cached`); a task that a stopped run of this key finished is restored instead. Adds the
    tasks' outputs to `outputs`; returns their results.json and predictions.json entries."""
    runs: dict[str, Any] = {}
    predictions: dict[str, Any] = {}
    finished = FinishedTasks.in_work_dir(sources.work_dir)
    for task in settings.plan:
        name = task.spec.name
        if finished.restore(name, outputs, runs, predictions):
            continue  # a stopped run of this key finished it
        result = evaluate_task(task, replace(sources, cached=cached(task)))
        outputs.update(result.outputs)
        runs[name], predictions[name] = result.record, result.predictions
        finished.keep(name, outputs, runs, predictions)
    return runs, predictions
