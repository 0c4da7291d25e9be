"""The one rule for secrets: what counts as one, and how it is masked wherever it would leave.

One pass over every string that leaves the process: MLflow params, tags and descriptions, the
logged config.yaml, the flow parameter Prefect stores, every log record (its traceback
included) on every handler (the console's and Prefect's API handler, which fills the Prefect
database), exception messages before Prefect turns them into state messages, and the console
streams themselves. It lives in the lowest layer so the one logging setup can install it too.
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

REDACTED = "***"
# A key is secret when one of its words (split at separators and camelCase) ends in one of these
# (`hfToken`, `apikey`, `private_key_pem`), or when it holds one of the unambiguous stems
# anywhere (`dbpassword`). Over-masking a harmless key costs a `***` in MLflow; the opposite
# leaks a credential, so the rule is broad on purpose.
SECRET_WORD_ENDINGS = ("token", "key", "secret", "private", "credential", "credentials")
SECRET_STEMS = ("password", "passwd", "passphrase", "secret", "credential", "privatekey")
KEY_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
URI_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")
# `name=value` in free text: a Hydra override echoed in a message, a URL's query string.
ASSIGNMENT = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)=(?P<value>[^\s&;,'\"\]}]+)")


def is_secret_key(key: str) -> bool:
    """`api-key`, `hfToken`, `DB_PASSWORD`, `dbpassword`, `passphrase`: yes; `max_tokens`: no."""
    words = [word.lower() for word in KEY_WORDS.findall(key)]
    joined = "".join(words)
    return any(word.endswith(SECRET_WORD_ENDINGS) for word in words) or any(
        stem in joined for stem in SECRET_STEMS
    )


def redact_text(text: str) -> str:
    """Masks credentials inside URIs (`postgresql://user:pw@host` -> `postgresql://***@host`)
    and the values of secret-named keys assigned in the text (`?api_key=...`,
    `tracking.password=...`)."""
    text = URI_USERINFO.sub(lambda match: f"{match['scheme']}{REDACTED}@", text)
    return ASSIGNMENT.sub(
        lambda match: f"{match['key']}={REDACTED}" if is_secret_key(match["key"]) else match[0],
        text,
    )


def redact_secrets(tree: Mapping[str, Any]) -> dict[str, Any]:
    """A copy with values under secret-looking keys masked, and URI credentials masked anywhere.

    The one rule for everything that leaves the process: MLflow params, the logged config.yaml,
    the flow parameter Prefect stores, and log lines (RedactingFilter). Secrets belong in the
    environment, not in `conf/`; this keeps one pasted into an override out of all of them.
    """
    return {
        key: REDACTED if is_secret_key(str(key)) else redact_value(value)
        for key, value in tree.items()
    }


def redact_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return redact_secrets(value)
    if isinstance(value, list | tuple):
        return [redact_value(item) for item in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_error(error: BaseException) -> None:
    """Masks URI credentials in the messages of `error` and of every exception chained to it,
    in place, so that the state message and traceback Prefect records hold none. An MLflow
    error names the full request URL, userinfo included; so can any library's."""
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        current.args = tuple(redact_text(a) if isinstance(a, str) else a for a in current.args)
        message = getattr(current, "message", None)  # MlflowException keeps its own copy
        if isinstance(message, str):
            current.message = redact_text(message)  # type: ignore[attr-defined]
        pending += [link for link in (current.__cause__, current.__context__) if link]


@contextmanager
def redacting_errors() -> Iterator[None]:
    """Whatever escapes the block leaves with its messages masked (`redact_error`)."""
    try:
        yield
    except BaseException as error:
        redact_error(error)
        raise


class RedactingFilter(logging.Filter):
    """Masks URI credentials in every log line a handler writes, and in its traceback.

    A logged exception is masked in place too (`redact_error`): Prefect's engines log a run's
    exception first and then make its state message from it, so this also covers flows whose
    body cannot be wrapped (a decorator would hide the flow's globals from Prefect, which
    resolves its parameter annotations there).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            redact_error(record.exc_info[1])
            if not record.exc_text:  # formatters write `exc_text` when it is set
                text = "".join(traceback.format_exception(*record.exc_info))
                record.exc_text = redact_text(text).rstrip("\n")
        message = record.getMessage()
        masked = redact_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def redact_log_handlers() -> None:
    """Installs `RedactingFilter` on every handler of every logger (once per handler): the root's,
    Prefect's console and API handlers, those of the loggers Prefect forwards. Call again after
    a library has added handlers (Prefect configures its logging when first imported)."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if not any(isinstance(item, RedactingFilter) for item in handler.filters):
                handler.addFilter(RedactingFilter())


class RedactingStream:
    """A console stream that masks URI credentials in what is written to it: the last line of
    defence, for what libraries print without logging (MLflow's "View run ... at: <URL>")."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(redact_text(text))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def writelines(self, lines: Iterator[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer...
        return getattr(self.stream, name)


def redact_console() -> None:
    """Puts `RedactingStream` in front of `sys.stdout` and `sys.stderr` (once). Call first
    thing, before handlers that keep a reference to the streams are made."""
    if not isinstance(sys.stdout, RedactingStream):
        sys.stdout = RedactingStream(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, RedactingStream):
        sys.stderr = RedactingStream(sys.stderr)  # type: ignore[assignment]
