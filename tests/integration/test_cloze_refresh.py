"""`cloze refresh`: the domain-refresh flow once from a shell, no deployment or server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import SERVED_RUN
from tests.integration.cli_runs import local_env

pytestmark = pytest.mark.slow


def test_a_refresh_from_the_shell_promotes_then_finds_nothing_new(tmp_path: Path) -> None:
    from flows.corpora.stdlib_docs import stdlib_docstrings

    corpus = tmp_path / "news"
    corpus.mkdir()
    texts = [doc.text for doc in stdlib_docstrings()][:600]
    (corpus / "part0.txt").write_text("\n\n".join(texts))
    command = [
        sys.executable,
        "-m",
        "flows.cloze",
        "refresh",
        "experiment=smoke",
        *SERVED_RUN,
        "corpus=files",
        f"corpus.paths=[{corpus}]",
        "refresh.domain=news",
    ]
    env = local_env(tmp_path / "home")
    for decision in ("promoted (no champion yet)", "no-new-data"):
        result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-3000:]
        assert f"domain news: {decision}" in output
