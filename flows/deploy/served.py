"""What the Prefect UI says of served deployments once `serve` stops.

Prefect's runner pauses its deployments as it stops, but a paused deployment still takes a run
triggered from the UI or `prefect deployment run`: the run waits, Scheduled then Late, for a
process that is gone, while the Deployments page read "Ready" until the server's foreman noticed
that nothing polled (a minute later). So `serve` marks each of its deployments as it stops: the
tag `not-served` (shown in the Deployments list) and a first line in its description (shown on
its page). Serving again registers the deployments afresh, which puts both back.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime

NOT_SERVED_TAG = "not-served"
NOTE_START = "**Not served**"
SERVE_COMMAND = "python -m flows.deploy serve"


def not_served_note(stopped: datetime) -> str:
    """The description's first line while nothing serves the deployment."""
    return (
        f"{NOTE_START} since {stopped:%Y-%m-%d %H:%M} UTC: `{SERVE_COMMAND}` stopped, so "
        f"nothing runs a triggered flow until it runs again."
    )


def stopped_line(names: Sequence[str], marked: bool = True) -> str:
    """What `serve` prints as it stops; `marked`: whether the Prefect UI could be told."""
    where = (
        f"are paused and tagged '{NOT_SERVED_TAG}' in the Prefect UI"
        if marked
        else "still read as served in the Prefect UI (its server did not answer)"
    )
    return (
        f"serve stopped: {', '.join(names)} {where}; nothing runs a triggered flow until "
        f"`{SERVE_COMMAND}` runs again"
    )


def with_note(note: str, description: str | None) -> str:
    """The note first, then the description without an earlier note."""
    body = description or ""
    if body.startswith(NOTE_START):
        body = body.partition("\n\n")[2]
    return f"{note}\n\n{body}".rstrip()


def mark_not_served(names: Sequence[str], stopped: datetime | None = None) -> bool:
    """Pauses each deployment (`<flow>/<deployment>`), tags it `not-served`, and puts the note
    first in its description; whether that worked. A failure is said, not raised: `serve` is
    stopping anyway (the caller checks first that the server answers: the client would retry
    for a minute)."""
    from prefect import get_client
    from prefect.client.schemas.actions import DeploymentUpdate

    note = not_served_note(stopped or datetime.now(UTC))
    try:
        with get_client(sync_client=True) as client:
            for name in names:
                deployment = client.read_deployment_by_name(name)
                tags = [tag for tag in deployment.tags if tag != NOT_SERVED_TAG]
                update = DeploymentUpdate(
                    paused=True,
                    tags=[*tags, NOT_SERVED_TAG],
                    description=with_note(note, deployment.description),
                )
                client.update_deployment(deployment.id, update)
    except Exception as error:  # whatever the API raised: serve is stopping either way
        print(f"warning: could not mark the deployments as not served: {error}", file=sys.stderr)
        return False
    return True
