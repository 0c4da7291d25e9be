"""What every deployed flow does with its run form: read it, name the run after it, compose the
config from it exactly as the CLI would, and end a run refused on a user's error with that one line.

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

from flows.core.config import compose_config
from flows.core.logs import SaidOnce
from flows.core.settings import ConfigError
from flows.corpora.formats import CorpusInputError
from flows.init_from_config import adopt_init
from flows.orchestration.run_form import RunForm
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
