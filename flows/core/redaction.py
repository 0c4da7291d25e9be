"""The one rule for secrets: what counts as one, and how it is masked wherever it would leave.

MLflow params, the logged config.yaml, the flow parameter Prefect stores and every log line go
through here. It lives in the lowest layer so the one logging setup can install it too.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

REDACTED = "***"
# A key is secret when one of its words (split at separators and camelCase) ends in one of these
# (`hfToken`, `apikey`, `private_key_pem`), or when it holds one of the unambiguous stems
# anywhere (`dbpassword`). Over-masking a harmless key costs a `***` in MLflow; the opposite
# leaks a credential, so the rule is broad on purpose.
SECRET_WORD_ENDINGS = ("token", "key", "secret", "private", "credential", "credentials")
SECRET_STEMS = ("password", "passwd", "passphrase", "secret", "credential", "privatekey")
KEY_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
URI_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")


def is_secret_key(key: str) -> bool:
    """`api-key`, `hfToken`, `DB_PASSWORD`, `dbpassword`, `passphrase`: yes; `max_tokens`: no."""
    words = [word.lower() for word in KEY_WORDS.findall(key)]
    joined = "".join(words)
    return any(word.endswith(SECRET_WORD_ENDINGS) for word in words) or any(
        stem in joined for stem in SECRET_STEMS
    )


def redact_text(text: str) -> str:
    """Masks credentials inside URIs: `postgresql://user:pw@host` -> `postgresql://***@host`."""
    return URI_USERINFO.sub(lambda match: f"{match['scheme']}{REDACTED}@", text)


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


class RedactingFilter(logging.Filter):
    """Masks URI credentials in every log line a handler writes (messages are formatted first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True
