"""The resolved run handed from its entry point to the flow run, in this process only.

Prefect stores a flow's parameters in its database and shows them in the UI, so a flow is given
the redacted config; the resolved run (flows/resolve.py), secrets and all, stays in this process
(a context variable) while the flow runs, and the flow takes it back from there. A flow run
started some other way (the UI, a deployment) resolves its config itself, through the same one
function, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from flows.core.redaction import redact_secrets
from flows.resolve import ResolvedRun, resolve_run

# The run in progress in this process, resolved by its entry point; Prefect only ever sees its
# config redacted.
_RESOLVED: ContextVar[ResolvedRun | None] = ContextVar("cloze_resolved", default=None)


@contextmanager
def handed_over(resolved: ResolvedRun) -> Iterator[dict[str, Any]]:
    """While the block runs, `resolved` is what a flow given the yielded redacted config takes
    back (`resolved_here`)."""
    token = _RESOLVED.set(resolved)
    try:
        yield redact_secrets(resolved.config)
    finally:
        _RESOLVED.reset(token)


def resolved_here(config: dict[str, Any], until: str, pretraining: bool = True) -> ResolvedRun:
    """The run this process resolved into `config`, or `config` resolved now: a flow run
    started some other way (the UI) goes through the same one function, once. `pretraining`:
    as resolve_run's (False for `cloze evaluate`)."""
    held = _RESOLVED.get()
    if (
        held is not None
        and (held.until, held.pretraining) == (until, pretraining)
        and redact_secrets(held.config) == config
    ):
        return held
    return resolve_run(config, until, pretraining=pretraining)
