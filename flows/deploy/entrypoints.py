"""The flows deployments run: a typed run form that becomes Hydra overrides, composed exactly as
the CLI does.

`python -m flows experiment=smoke trainer.max_steps=5` and a deployment run with
`experiment="smoke", max_steps=5` resolve the same config, because both go through `resolve_run`
with the same list (`RunForm.to_overrides`). Resolution happens inside the flow run, so a run
triggered from the UI is validated (and fails with the config key named) like a shell run.
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.states import State

from flows.orchestration.flow_runs import (
    EXPECTED_ERRORS,
    read_form,
    refused,
    resolve_form,
    run_name,
)
from flows.orchestration.run_form import (
    DEFAULT_MODEL,
    DEFAULT_OBJECTIVE,
    DEFAULT_STEPS,
    DEFAULT_TASKS,
    NO_EXPERIMENT,
    Experiment,
    Model,
    Objective,
    Stage,
    Steps,
    Task,
    described_by_form,
)
from flows.pipeline import PIPELINE_FLOW, run_stages


@flow(name=PIPELINE_FLOW, flow_run_name=run_name, log_prints=True)
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
        return run_stages(resolve_form(form))  # its one artifact: run_stages publishes it
    except EXPECTED_ERRORS as error:
        return refused(error)
