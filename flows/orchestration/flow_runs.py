"""What every deployed flow does with its run form: read it, resolve the config from it exactly
as the CLI does (flows/resolve.py), name the run after it, and end a run refused on a user's error
with that one line.

The pipeline deployment (flows/deploy/entrypoints.py) and the domain refresh (flows/refresh/flow.py)
share these, so neither imports the other.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from prefect import get_run_logger
from prefect.runtime import flow_run
from prefect.states import Failed, State
from pydantic import ValidationError

from flows.core.logs import SaidOnce
from flows.core.settings import ConfigError
from flows.corpora.formats import CorpusInputError
from flows.orchestration.run_form import RunForm
from flows.plan import start_services
from flows.resolve import ResolvedRun, resolve_run
from flows.tracking.links import TIMESTAMP_FORMAT, run_label

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


# Runs this process resolved already, for the flow body to take rather than resolve again: by
# flow run id once `run_name` resolved one (Prefect names a run before its body starts, in the
# same process), and under CALLER the one a command line resolved before calling the flow.
_RESOLVED: dict[str, ResolvedRun] = {}
CALLER = ""


def hand_over(resolved: ResolvedRun) -> None:
    """A command line's resolved run, for the flow it calls next in this process."""
    _RESOLVED[CALLER] = resolved


def taken(key: str | None, form: RunForm) -> ResolvedRun | None:
    """The run resolved under `key`, if it is the one `form` configures."""
    held = _RESOLVED.pop(key, None) if key is not None else None
    if held is None or (held.run.overrides, held.until) != (form.to_overrides(), form.until):
        return None
    return held


def run_name(pretraining: bool = True) -> str:
    """`<UTC time>-<model>[-<experiment>]-<corpus or domain>` from the run's parameters
    (`pretraining`: as resolve_run's).

    An invalid config must not fail here, where the error would be obscure: the run is named
    `invalid-config-...`, and the flow body resolves again and reports it with the key named.
    """
    try:
        form = read_form(**flow_run.get_parameters())
        resolved = taken(CALLER, form) or resolve_run(
            form.to_overrides(), form.until, pretraining=pretraining
        )
    except EXPECTED_ERRORS:
        return f"invalid-config-{datetime.now(UTC).strftime(TIMESTAMP_FORMAT)}"
    run_id = flow_run.get_id()
    if run_id:
        _RESOLVED[run_id] = resolved
    return run_label(resolved.run.overrides, resolved.config)  # a checkpoint names the model


def evaluation_name() -> str:
    """`run_name` of a `cloze evaluate` run, which builds no shards."""
    return run_name(pretraining=False)


def resolve_form(form: RunForm, pretraining: bool = True) -> ResolvedRun:
    """The run `form` configures, resolved once in this process (by `run_name`, or now), with
    the services pointed at its home (`pretraining`: as resolve_run's)."""
    resolved = taken(flow_run.get_id(), form) or resolve_run(
        form.to_overrides(), form.until, pretraining=pretraining
    )
    start_services(resolved.run)
    return resolved
