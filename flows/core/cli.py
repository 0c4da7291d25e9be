"""The one way a command-line entry point stops on a user's error: `error: ...` on stderr, and an
exit code a script can branch on (2: bad input or config; 3: the run cannot go on: a service is
unreachable or did not start, the disk is full, training diverged)."""

from __future__ import annotations

import sys

from flows.core.redaction import redact_text

USAGE_ERROR = 2
SERVICE_ERROR = 3


def fail(error: BaseException | str, code: int = USAGE_ERROR) -> int:
    """Prints the error for the user (no traceback: the message names what to fix); returns
    the exit code for `main` to return."""
    print(f"error: {redact_text(str(error))}", file=sys.stderr)
    return code
