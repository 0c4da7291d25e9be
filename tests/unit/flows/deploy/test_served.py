"""The note a stopped `serve` leaves on its deployments' descriptions."""

from __future__ import annotations

from datetime import UTC, datetime

from flows.deploy.served import not_served_note, stopped_line, with_note

STOPPED = datetime(2026, 12, 4, 21, 30, tzinfo=UTC)


def test_the_note_comes_first_and_replaces_an_earlier_one() -> None:
    note = not_served_note(STOPPED)
    assert note.startswith("**Not served** since 2026-12-04 21:30 UTC: ")
    assert "nothing runs a triggered flow until it runs again" in note
    described = with_note(note, "Cloze full: a typed run form")
    assert described == f"{note}\n\nCloze full: a typed run form"
    later = not_served_note(STOPPED.replace(hour=22))
    assert with_note(later, described) == f"{later}\n\nCloze full: a typed run form"
    assert with_note(note, None) == note


def test_serve_says_as_it_stops_which_deployments_nothing_will_run() -> None:
    assert stopped_line(["cloze-pipeline/full", "domain-refresh/domain-refresh"]) == (
        "serve stopped: cloze-pipeline/full, domain-refresh/domain-refresh are paused and tagged "
        "'not-served' in the Prefect UI; nothing runs a triggered flow until "
        "`python -m flows.deploy serve` runs again"
    )
    assert stopped_line(["cloze-pipeline/full"], marked=False) == (
        "serve stopped: cloze-pipeline/full still read as served in the Prefect UI (its server "
        "did not answer); nothing runs a triggered flow until `python -m flows.deploy serve` runs "
        "again"
    )
