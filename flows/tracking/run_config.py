"""A run's config on its MLflow run: whole, secrets masked, and as params a table can group; and
its summary's figures as the run's metrics."""

from __future__ import annotations

from typing import Any

from flows.core.config import to_yaml
from flows.core.redaction import redact_secrets
from flows.tracking.runs import RunHandle


def log_config(run: RunHandle, config: dict[str, Any]) -> None:
    """The config, secrets masked: whole as `config.yaml`, and as params flattened under their
    section's prefix (`trainer.max_steps`), so MLflow's table groups them by section.

    The params list only the catalog entries of the tasks the run fine-tunes on: the other
    tasks' files and columns (a third of all keys) would be columns of noise in the table.
    """
    loggable = redact_secrets(config)
    run.log_params(params_of(loggable))
    run.log_text(to_yaml(loggable), "config.yaml")


def params_of(config: dict[str, Any]) -> dict[str, Any]:
    finetune = config.get("finetune")
    if not isinstance(finetune, dict) or not isinstance(finetune.get("catalog"), dict):
        return config
    tasks = set(finetune.get("tasks") or [])
    catalog = {name: spec for name, spec in finetune["catalog"].items() if name in tasks}
    return {**config, "finetune": {**finetune, "catalog": catalog}}


def log_summary(run: RunHandle, summary: dict[str, Any]) -> None:
    """Each stage's figures of a run's summary (flows/summary.py) as `<stage>.<name>` metrics of
    its parent run, so MLflow's table compares runs by them."""
    run.log_metrics(
        {
            f"{stage}.{name}": value
            for stage, outputs in summary["stages"].items()
            for name, value in outputs.items()
        }
    )
