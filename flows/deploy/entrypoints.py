"""The flows deployments run: a typed run form that becomes Hydra overrides, composed exactly as
the CLI does.

`python -m flows experiment=smoke trainer.max_steps=5` and a deployment run with
`experiment="smoke", max_steps=5` compose the same config, because both go through
`compose_config` with the same list (`RunForm.to_overrides`). Composition happens inside the
flow run, so a run triggered from the UI is validated (and fails with the config key named) like
a shell run.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run
from prefect.states import Failed, State
from pydantic import ValidationError

from flows.base_checkpoint import adopt_init
from flows.core.config import compose_config
from flows.core.logs import SaidOnce
from flows.core.settings import ConfigError
from flows.core.tables import markdown_table
from flows.corpora.formats import CorpusInputError
from flows.deploy.form import (
    DEFAULT_MODEL,
    DEFAULT_OBJECTIVE,
    DEFAULT_STEPS,
    DEFAULT_TASKS,
    NO_EXPERIMENT,
    Experiment,
    Model,
    Objective,
    RunForm,
    Stage,
    Steps,
    Task,
    described_by_form,
)
from flows.pipeline import run_stages
from flows.plan import load_run_config, start_services
from flows.tracking.links import TIMESTAMP_FORMAT, run_label


def compose_run_config(form: RunForm) -> dict[str, Any]:
    config = compose_config(form.to_overrides())
    start_services(load_run_config(config))
    return config


# A user's error, named by its message (a bad form value, config key or input file): the run
# fails with that one line as its state message, and no traceback in its logs.
EXPECTED_ERRORS: tuple[type[Exception], ...] = (ConfigError, CorpusInputError)
FLOW_RUN_LOGGER = "prefect.flow_runs"  # where Prefect's engine logs a flow run's end


def refused(error: Exception) -> State:
    """The final state of a run refused on an expected error, its line logged once."""
    get_run_logger().error("error: %s", error)
    logging.getLogger(FLOW_RUN_LOGGER).addFilter(SaidOnce(str(error)))
    return Failed(message=str(error))


def read_form(**parameters: Any) -> RunForm:
    """The form from a run's parameters; a bad one is a ConfigError naming the parameter."""
    try:
        return RunForm(**parameters)
    except ValidationError as error:
        first = error.errors()[0]
        name = ".".join(str(part) for part in first["loc"])
        raise ConfigError(
            f"parameter {name}: {first['msg']} (got {first.get('input')!r})"
        ) from None


def run_name() -> str:
    """`<model>[-<experiment>]-<corpus or domain>-<UTC timestamp>` from the run's parameters.

    An invalid override must not fail here, where the error would be obscure; the flow body
    composes again and reports it with the config key named.
    """
    try:
        form = read_form(**flow_run.get_parameters())
        overrides = form.to_overrides()
        config = adopt_init(compose_config(overrides))[0]  # a checkpoint names the model
    except ConfigError:
        return f"invalid-config-{datetime.now(UTC).strftime(TIMESTAMP_FORMAT)}"
    return run_label(overrides, config)


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
            f"MLflow: experiment `{summary['experiment']}`, run "
            f"[{summary['mlflow_run_id']}]({summary['mlflow_run_url']}) on "
            f"{summary['tracking_uri']}",
        ]
    )


@flow(name="cloze-pipeline", flow_run_name=run_name, log_prints=True)
@described_by_form
def pipeline_deployment(
    experiment: Experiment = NO_EXPERIMENT,
    until: Stage = "finetune",
    model: Model = DEFAULT_MODEL,
    objective: Objective = DEFAULT_OBJECTIVE,
    corpus_paths: list[str] = [],  # noqa: B006 (defaults the UI shows; never mutated)
    init_from: str = "",
    max_steps: Steps = DEFAULT_STEPS,
    tasks: list[Task] = DEFAULT_TASKS,
    overrides: list[str] = [],  # noqa: B006
) -> dict[str, Any] | State:
    """The pipeline through `until` (a stage deployment stops early), configured by the form.

    The stages run as this flow run's own tasks, so its page shows them and their logs.
    """
    try:
        form = read_form(
            experiment=experiment,
            until=until,
            model=model,
            objective=objective,
            corpus_paths=corpus_paths,
            init_from=init_from,
            max_steps=max_steps,
            tasks=tasks,
            overrides=overrides,
        )
        summary = run_stages(compose_run_config(form), form.until)
    except EXPECTED_ERRORS as error:
        return refused(error)
    create_markdown_artifact(
        pipeline_markdown(summary, form.until),
        key=f"cloze-{form.until}-summary",
        description="Cloze pipeline run: stages, cache hits, figures and the MLflow run",
    )
    return summary
