"""What the guides quote of a run's output, checked against a real run's output by the tests.

A test names the quote through `guide_quotes`: the guide must still hold it (whitespace and
line breaks aside), and the test then checks that the run printed it. A guide edited without its
test, or output changed without its guide, fails here.
"""

from __future__ import annotations

from tests.fakes import REPO

GUIDES = REPO / "docs" / "guides"


def guide_quotes(guide: str, quote: str) -> str:
    """`quote`, once `docs/guides/<guide>` is seen to hold it."""
    text = " ".join((GUIDES / guide).read_text().split())
    assert " ".join(quote.split()) in text, (
        f"docs/guides/{guide} no longer quotes {quote!r}: change its test with it"
    )
    return quote
