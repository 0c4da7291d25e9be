"""`cloze refresh [OVERRIDE ...]`: one domain refresh now, from this shell, without a server.

The `domain-refresh` deployment runs on a schedule; this runs the same flow once in this process,
as `cloze run` runs the pipeline: a temporary Prefect server and the local MLflow store unless
the environment names servers. The overrides are the deployment's (`refresh.domain=legal
corpus=files 'corpus.paths=[/data/legal]'`).
"""

from __future__ import annotations

import argparse

from flows.core.cli import SERVICE_ERROR, fail
from flows.core.logs import setup_logging
from flows.core.redaction import redact_console
from flows.core.settings import ConfigError
from flows.corpora.formats import CorpusInputError
from flows.plan import start_services
from flows.resolve import resolve_run
from flows.tracking.temporary_server import bind_temporary_server_to_this_run


def parse_args(argv: list[str], prog: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Refresh a domain's model once: fingerprint the corpus against the last "
        "refresh, continue pretraining the champion on new and changed files, fine-tune "
        "challenger and champion alike, promote the challenger only if it wins by "
        "refresh.margin (docs/guides/deployments.md).",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="OVERRIDE",
        help="a Hydra override; refresh.domain=NAME and the corpus are required",
    )
    return parser.parse_intermixed_args(argv)


def main(argv: list[str], prog: str = "python -m flows.refresh.cli") -> int:
    """0 once the refresh recorded its decision; 2 on a bad config; 3 when the run failed."""
    args = parse_args(argv, prog)
    redact_console()  # before any handler keeps a reference to the streams
    try:
        resolved = resolve_run(args.overrides)
        resolved.run.refresh.require_domain()
        start_services(resolved.run)
    except (ConfigError, CorpusInputError) as error:
        return fail(error)
    bind_temporary_server_to_this_run()
    setup_logging()
    from flows.orchestration.flow_runs import hand_over
    from flows.refresh.flow import domain_refresh  # after start_services: Prefect reads env

    hand_over(resolved)  # the flow takes it rather than resolving again

    state = domain_refresh(overrides=args.overrides, return_state=True)
    if state.is_completed():
        return 0
    return fail(state.message or "the refresh failed (its log says why)", SERVICE_ERROR)
