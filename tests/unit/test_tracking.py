from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

from flows.core.redaction import REDACTED, redact_secrets
from flows.tracking.runs import Tracker, flatten


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


def open_tracker(uri: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        Tracker(uri, "cloze", None)
        results.put("ok")
    except Exception as error:
        results.put(f"{type(error).__name__}: {error}")


def test_two_processes_opening_a_fresh_sqlite_store_at_once_both_succeed(tmp_path: Path) -> None:
    # Without the set-up lock, MLflow's schema migration raced here in 3 trials out of 3.
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    workers = [context.Process(target=open_tracker, args=(uri, barrier, results)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [results.get(timeout=1) for _ in workers] == ["ok", "ok"]
