"""The flows deployments run: parameters are Hydra overrides, composed exactly as the CLI does.

`python -m flows experiment=smoke trainer.max_steps=5` and a deployment run with
`experiment="smoke", overrides=["trainer.max_steps=5"]` compose the same config, because both go
through `compose_config` with the same list. Composition happens inside the flow run, so a run
triggered from the UI is validated (and fails with the config key named) like a shell run.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from flows.core.config import compose_config
from flows.core.settings import ConfigError
from flows.core.tables import markdown_table
from flows.deploy.settings import run_overrides
from flows.pipeline import STAGES, pretraining_pipeline
from flows.plan import load_run_config, start_services


def compose_run_config(overrides: list[str] | None, experiment: str | None) -> dict[str, Any]:
    config = compose_config(run_overrides(overrides, experiment))
    start_services(load_run_config(config))
    return config


def corpus_label(corpus: dict[str, Any]) -> str:
    if corpus["kind"] == "files" and corpus.get("paths"):
        return Path(corpus["paths"][0]).name or "files"
    if corpus["kind"] == "huggingface" and corpus.get("name"):
        return str(corpus["name"]).rstrip("/").rsplit("/", 1)[-1]
    return str(corpus["kind"])


def run_name() -> str:
    """`<experiment>-<corpus>-<UTC date>` from the run's own parameters, for the Prefect UI.

    An invalid override must not fail here, where the error would be obscure; the flow body
    composes again and reports it with the config key named.
    """
    parameters = flow_run.get_parameters()
    experiment = parameters.get("experiment")
    date = datetime.now(UTC).strftime("%Y%m%d-%H%M")
    try:
        config = compose_config(run_overrides(parameters.get("overrides"), experiment))
    except ConfigError:
        return f"invalid-config-{date}"
    name = experiment or config["tracking"]["experiment"]
    domain = config.get("refresh", {}).get("domain")
    corpus = corpus_label(config["corpus"])
    return f"{name}-{domain or corpus}-{date}"


def pipeline_markdown(summary: dict[str, Any], until: str) -> str:
    rows = []
    for stage, outputs in summary["stages"].items():
        figures = ", ".join(
            f"{name} {value:.4g}"
            for name, value in outputs.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        )
        origin = "reused" if outputs["cache_hit"] else "computed"
        rows.append((stage, origin, f"`{outputs['key']}`", figures))
    return "\n".join(
        [
            f"# Cloze pipeline (through `{until}`)",
            "",
            markdown_table(["stage", "origin", "artifact key", "figures"], rows),
            "",
            f"MLflow: experiment `{summary['experiment']}`, run `{summary['mlflow_run_id']}` at "
            f"{summary['tracking_uri']}",
        ]
    )


@flow(name="cloze-pipeline", flow_run_name=run_name, log_prints=True)
def pipeline_deployment(
    overrides: list[str] | None = None, experiment: str | None = None, until: str = "finetune"
) -> dict[str, Any]:
    """The pipeline through `until` (a stage deployment stops early), configured by overrides."""
    if until not in STAGES:
        raise ConfigError(f"until={until!r} must be one of {STAGES}")
    config = compose_run_config(overrides, experiment)
    summary = pretraining_pipeline(config, until)
    create_markdown_artifact(
        pipeline_markdown(summary, until),
        key=f"cloze-{until}-summary",
        description="Cloze pipeline run: stages, cache hits, figures and the MLflow run",
    )
    return summary
