"""One broad redaction rule for MLflow params, config.yaml, Prefect parameters and log lines."""

from __future__ import annotations

import io
import logging
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest

from flows.core.redaction import (
    REDACTED,
    RedactingFilter,
    RedactingStream,
    is_secret_key,
    redact_log_handlers,
    redact_secrets,
    redact_text,
    redacting_errors,
)

SECRET_KEYS = [
    "token", "api_token", "apikey", "api-key", "apiKey", "hfToken", "HF_TOKEN", "hf.token",
    "key", "access_key", "aws_secret", "client_secret", "password", "dbpassword", "DB_PASSWORD",
    "passwd", "passphrase", "ssh_passphrase", "credentials", "gcp_credential", "private",
    "private_key_pem", "privateKey",
]  # fmt: skip
PLAIN_KEYS = [
    "vocab_size", "max_tokens", "special_tokens", "tokenizer", "mask", "pad", "uri",
    "tracking_uri", "learning_rate", "from_artifact", "keyword_count",
]  # fmt: skip


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_secret_spellings_are_recognised(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_ordinary_keys_are_kept(key: str) -> None:
    assert not is_secret_key(key)


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        ("http://user:pw@host:5000/x", "http://***@host:5000/x"),
        ("postgresql://cloze:s3cr%40t@db.local/mlflow", "postgresql://***@db.local/mlflow"),
        ("s3://bucket/path", "s3://bucket/path"),
        ("see https://token@github.com/org", "see https://***@github.com/org"),
    ],
)
def test_credentials_inside_uris_are_masked_in_any_value(value: str, masked: str) -> None:
    redacted = redact_secrets({"tracking": {"tracking_uri": value, "list": [value]}})
    assert redacted == {"tracking": {"tracking_uri": masked, "list": [masked]}}


def test_log_lines_lose_uri_credentials(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("cloze.test.redaction")
    caplog.handler.addFilter(RedactingFilter())
    logger.warning("cannot reach %s", "postgresql://cloze:pw@db/mlflow")
    assert "pw@" not in caplog.text and "postgresql://***@db/mlflow" in caplog.text


def test_prefect_stores_the_flow_parameter_redacted_while_the_run_sees_the_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.client.orchestration import get_client

    from flows import pipeline
    from flows.core.config import compose_config
    from flows.resolve import resolve_run

    text = "\n\n".join(f"some words number {n} here" for n in range(50))
    (tmp_path / "text.txt").write_text(text)
    config = compose_config(
        ["experiment=smoke", "corpus=files", f"corpus.paths=[{tmp_path / 'text.txt'}]",
         f"paths.root={tmp_path / 'home'}"]
    )  # fmt: skip
    # Unknown top-level keys are refused, so a secret rides in a real one: URI credentials.
    config["tracking"]["uri"] = "http://cloze:hunter2@127.0.0.1:9"
    seen: list[dict] = []

    def stages_of(resolved: Any) -> None:  # stop the flow at once, keeping what it was given
        seen.append(resolved.config)
        raise pipeline.ConfigError("stopped by the test")

    monkeypatch.setattr(pipeline, "run_stages", stages_of)
    state = pipeline.pretraining_pipeline(resolve_run(config, "tokenizer"), return_state=True)
    assert state.is_failed() and "hunter2" in seen[0]["tracking"]["uri"]
    with get_client(sync_client=True) as client:
        stored = client.read_flow_run(state.state_details.flow_run_id).parameters
    assert stored["config"]["tracking"]["uri"] == f"http://{REDACTED}@127.0.0.1:9"
    assert "hunter2" not in str(stored)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("GET https://hub/x?api_key=abc123&page=2", "GET https://hub/x?api_key=***&page=2"),
        ("override +tracking.password=hunter2 refused", "override +tracking.password=*** refused"),
        ("trainer.max_steps=5 corpus.paths=[/data]", "trainer.max_steps=5 corpus.paths=[/data]"),
    ],
)
def test_secret_named_assignments_in_free_text_are_masked(text: str, masked: str) -> None:
    assert redact_text(text) == masked


PLANTED = "http://cloze:planted-pw@127.0.0.1:1/x"


def test_an_error_leaves_with_its_whole_chain_masked() -> None:
    """What Prefect turns into a state message and a traceback: every link of the chain."""
    from mlflow.exceptions import MlflowException

    with pytest.raises(RuntimeError) as caught, redacting_errors():
        try:
            raise MlflowException(f"API request to {PLANTED} failed")
        except MlflowException as inner:
            raise RuntimeError(f"MLflow at {PLANTED} did not answer") from inner
    text = "".join(traceback.format_exception(caught.value))
    assert "planted-pw" not in text and "http://***@127.0.0.1:1/x" in text
    assert "planted-pw" not in caught.value.__cause__.message


def test_a_logged_traceback_is_masked_on_every_handler() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("cloze.test.traceback")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    try:
        redact_log_handlers()  # the handler was made after the logging setup, as Prefect's are
        error = ConnectionError(f"cannot reach {PLANTED}")
        try:
            raise error
        except ConnectionError:
            logger.exception("the call failed")
    finally:
        logger.removeHandler(handler)
    assert "planted-pw" not in stream.getvalue() and "ConnectionError: cannot reach" in (
        stream.getvalue()
    )
    # Masked in place: Prefect makes the run's state message from the exception it just logged.
    assert str(error) == "cannot reach http://***@127.0.0.1:1/x"


def test_the_console_streams_are_masked(capsys: pytest.CaptureFixture[str]) -> None:
    stream = RedactingStream(sys.stderr)
    print(f"View run at: {PLANTED}", file=stream)
    assert capsys.readouterr().err == "View run at: http://***@127.0.0.1:1/x\n"
