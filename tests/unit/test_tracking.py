from __future__ import annotations

from flows.tracking import REDACTED, flatten, redact_secrets


def test_secret_looking_values_are_masked_and_the_rest_kept() -> None:
    config = {
        "tracking": {"uri": "http://127.0.0.1:5000", "api_token": "abc", "password": "p"},
        "storage": {"aws_secret": "s", "access_key": "k", "key": "k2"},
        "tokenizer": {"vocab_size": 8000, "special_tokens": {"mask": "[MASK]"}},
        "trainer": {"max_tokens": 1000},
    }
    safe = dict(flatten(redact_secrets(config)))
    assert {name for name, value in safe.items() if value == REDACTED} == {
        "tracking.api_token",
        "tracking.password",
        "storage.aws_secret",
        "storage.access_key",
        "storage.key",
    }
    assert safe["tokenizer.special_tokens.mask"] == "[MASK]"
    assert safe["trainer.max_tokens"] == 1000
    assert config["tracking"]["api_token"] == "abc"  # the original is untouched
