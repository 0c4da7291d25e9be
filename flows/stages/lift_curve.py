"""Stage 4b: the lift-vs-compute curve, when `finetune.checkpoints` lists fractions below 1.0.

Each fraction's encoder weights (kept by the pretrain stage) get the finetune stage's pretrained
arm: the same seeds, data, learning-rate grid and early stopping. Its control is the random-init
arm the finetune stage already ran (random init does not depend on how long pretraining ran), read
back with its test predictions, so each point's lift is paired by seed and bootstrapped over the
same test examples. A run that continued a checkpoint reads the finetune stage's `base` arm too:
each point then also says what that much continuation bought over the checkpoint (adapted over
base, both intervals), on the grid for pretrained encoders, which tells "how many steps pay".
Each point is its own content-addressed artifact (`finetune_checkpoint`), so adding a fraction
evaluates only that one; the curve (`lift_curve`: lift_curve.png, curve.json)
is one more artifact over them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flows.core.artifacts import ArtifactRef, ArtifactStore, stage_key
from flows.core.settings import ConfigError
from flows.downstream.evaluate import evaluate_point
from flows.downstream.finetuning.recipe import ArmResult, LoggerFactory
from flows.downstream.settings import FinetuneSettings
from flows.downstream.statistics.base_report import OVER_BASE
from flows.downstream.statistics.lift_points import CURVE_STAGE, flat_points, plot_curves, point
from flows.downstream.statistics.task_figures import TaskFigures
from flows.downstream.tasks.spec import BASE_ARM
from flows.stages.control_arm import CONTROL_ARM
from flows.stages.finetune import (
    PREDICTIONS_FILE,
    RESULTS_FILE,
    checkpoint_grids,
    stage_settings,
    stage_sources,
)
from flows.stages.pretrain import KEPT_DIR
from flows.stages.training_types import FinetuneOutputs, PretrainOutputs
from flows.training.settings import TrainerSettings

CHECKPOINT_STAGE = "finetune_checkpoint"
VERSION = 3
CURVE_CHART = "lift_curve.png"
OVER_BASE_CHART = "over_base_curve.png"  # a continuation's: adapted over base
CURVE_FILE = "curve.json"


def kept_weights(settings: FinetuneSettings, pretrain_ref: ArtifactRef) -> dict[float, Path]:
    """Each asked fraction's weights; a pretrain artifact without them is a config error."""
    kept = PretrainOutputs.of(pretrain_ref).kept_checkpoints
    paths = {f: pretrain_ref.path / KEPT_DIR / f"{f:g}" for f in settings.curve_fractions}
    missing = [f"{f:g}" for f, path in paths.items() if f"{f:g}" not in kept or not path.is_dir()]
    if missing:
        raise ConfigError(
            f"finetune.checkpoints={settings.checkpoints} asks for the encoder at "
            f"{', '.join(missing)} of pretraining, but pretrain artifact {pretrain_ref.key} kept "
            f"only {sorted(kept) or ['1']}; rerun pretraining with these finetune.checkpoints "
            "(the pipeline passes them to the pretrain stage)"
        )
    return paths


def reference_arms(finetune_ref: ArtifactRef) -> dict[str, dict[str, ArmResult]]:
    """Each task's arms of the finetune stage that do not depend on how long pretraining ran
    (random init, and a continued checkpoint's base), with their test predictions."""
    results = json.loads((finetune_ref.path / RESULTS_FILE).read_text())
    predictions = json.loads((finetune_ref.path / PREDICTIONS_FILE).read_text())
    return {
        task: {
            arm: ArmResult.from_record(record[arm], predictions[task][arm])
            for arm in (CONTROL_ARM, BASE_ARM)
            if arm in record
        }
        for task, record in results.items()
    }


def evaluate_checkpoint(
    fraction: float,
    weights: Path,
    settings: FinetuneSettings,
    seed: int,
    trainer: TrainerSettings,
    refs: dict[str, ArtifactRef],
    store: ArtifactStore,
    loggers_for: LoggerFactory,
) -> ArtifactRef:
    """The finetune outputs (`<task>.lift_*`, intervals) of the weights kept at `fraction`."""
    base = refs.get("checkpoint")
    record: dict[str, Any] = {
        "settings": {**stage_settings(settings, seed, trainer), "fraction": fraction},
        "inputs": {name: ref.key for name, ref in refs.items()},
    }
    if base is not None:  # as in the finetune stage's key: absent otherwise, keys stay put
        record["settings"]["checkpoint_grids"] = checkpoint_grids(settings)
    key = stage_key(CHECKPOINT_STAGE, VERSION, record["settings"], record["inputs"])

    def build(directory: Path) -> dict[str, Any]:
        references = reference_arms(refs["finetune"])
        sources = stage_sources(
            settings,
            seed,
            trainer,
            refs["tokenizer"],
            weights,
            store.work_dir(CHECKPOINT_STAGE, key),
            lambda task, label: loggers_for(task, f"at{fraction:g}-{label}"),
            # With a checkpoint, the pretrained arm tunes on the checkpoint grid, as at 1.0.
            base_dir=None if base is None else base.path,
        )
        outputs: dict[str, Any] = {"fraction": fraction}
        for task in settings.plan:
            outputs.update(evaluate_point(task, sources, references[task.spec.name]))
        return outputs

    return store.get_or_build(CHECKPOINT_STAGE, key, build, record)


def lift_curve(
    settings: FinetuneSettings,
    seed: int,
    trainer: TrainerSettings,
    refs: dict[str, ArtifactRef],
    store: ArtifactStore,
    loggers_for: LoggerFactory = lambda task, label: (),
) -> ArtifactRef | None:
    """The curve over `finetune.checkpoints` (None when it lists only 1.0). `refs` holds the
    run's `pretrain`, `tokenizer` and `finetune` artifacts."""
    if not settings.curve_fractions:
        return None
    weights = kept_weights(settings, refs["pretrain"])
    points = {
        fraction: evaluate_checkpoint(
            fraction, path, settings, seed, trainer, refs, store, loggers_for
        )
        for fraction, path in weights.items()
    }
    points[1.0] = refs["finetune"]
    record: dict[str, Any] = {
        "settings": {"fractions": sorted(points)},
        "inputs": {f"{fraction:g}": ref.key for fraction, ref in points.items()},
    }
    key = stage_key(CURVE_STAGE, VERSION, record["settings"], record["inputs"])
    base = refs.get("checkpoint")
    kept = PretrainOutputs.of(refs["pretrain"]).kept_checkpoints
    tokens = {fraction: kept[f"{fraction:g}"]["tokens"] for fraction in points}
    final = FinetuneOutputs.of(refs["finetune"]).figures

    def build(directory: Path) -> dict[str, Any]:
        outputs: dict[str, Any] = {"tasks": list(settings.tasks), "fractions": sorted(points)}
        series = {}
        for task in settings.tasks:
            task_points = {
                fraction: point(TaskFigures.read(ref.outputs, task), tokens[fraction])
                for fraction, ref in sorted(points.items())
            }
            outputs.update(flat_points(task, task_points))
            series[f"{task} ({final[task].metric})"] = list(task_points.values())
        plot_curves(series, directory / CURVE_CHART)
        if base is not None:
            plot_curves(series, directory / OVER_BASE_CHART, OVER_BASE)
        (directory / CURVE_FILE).write_text(json.dumps(outputs, indent=2))
        return outputs

    return store.get_or_build(CURVE_STAGE, key, build, record)
