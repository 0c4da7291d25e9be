"""`cloze refresh`: the domain-refresh flow once from a shell, no deployment or server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tests.checkpoint_tokenizers import write_tokenizer
from tests.checkpoints import tiny_checkpoint
from tests.fakes import SERVED_RUN
from tests.integration.cli_runs import local_env

pytestmark = pytest.mark.slow


def news_corpus(tmp_path: Path, documents: int) -> tuple[Path, list[str]]:
    """An empty `news` folder for the domain's files, and `documents` texts to write there."""
    from flows.corpora.stdlib_docs import stdlib_docstrings

    corpus = tmp_path / "news"
    corpus.mkdir()
    return corpus, [doc.text for doc in stdlib_docstrings()][:documents]


def refresh(corpus: Path, home: Path, *overrides: str) -> str:
    """`cloze refresh` of the `news` domain over `corpus`, which must succeed; its output."""
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
        *overrides,
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=900, env=local_env(home)
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    return output


def test_a_refresh_from_the_shell_promotes_then_finds_nothing_new(tmp_path: Path) -> None:
    corpus, texts = news_corpus(tmp_path, 600)
    (corpus / "part0.txt").write_text("\n\n".join(texts))
    for decision in ("promoted (no champion yet)", "no-new-data"):
        assert f"domain news: {decision}" in refresh(corpus, tmp_path / "home")


def test_the_first_refresh_continues_the_checkpoint_then_the_next_its_champion(
    tmp_path: Path,
) -> None:
    # The path teams take: a public checkpoint (here a tiny headless BERT), continued on their
    # domain's text as it grows. The first refresh imports it and its tokenizer and keeps it as
    # the `base` arm the challenger is checked against; the next continues the champion, whose
    # MLM head is trained, so no step trains the head alone.
    folder = tmp_path / "bert-tiny"
    size = write_tokenizer(folder, "wordpiece")
    tiny_checkpoint("bert", folder, vocab_size=size, architecture="BertModel")
    corpus, texts = news_corpus(tmp_path, 1200)
    (corpus / "part0.txt").write_text("\n\n".join(texts[:600]))
    root = tmp_path / "root"
    overrides = [
        f"pretrain.init_from={folder}",
        "pretrain.head_warmup_steps=4",
        f"paths.root={root}",
    ]
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")

    def latest(filter_string: str) -> Any:
        experiment = client.get_experiment_by_name("cloze")
        assert experiment is not None
        [run, *_] = client.search_runs(
            [experiment.experiment_id],
            filter_string,
            order_by=["attributes.start_time DESC"],
        )
        return run.data

    def refreshed() -> tuple[str, dict[str, str]]:
        output = refresh(corpus, tmp_path / "home", *overrides)
        return output, latest("tags.`cloze.refresh.domain` = 'news'").tags

    output, first = refreshed()
    assert "checkpoint: computed" in output and "the new MLM head trains alone" in output
    assert first["cloze.refresh.continued_from"] == str(folder)
    # The challenger was scored over the checkpoint as it was (the check that refuses one worse).
    assert (
        "pydoc_topics.over_base_accuracy"
        in latest("tags.mlflow.runName = 'challenger finetune'").metrics
    )
    assert first["cloze.refresh.decision"] == "promoted"

    (corpus / "part1.txt").write_text("\n\n".join(texts[600:]))
    output, second = refreshed()
    assert "pretrain.head_warmup_steps=4 set aside: the champion's MLM head is trained" in output
    assert "the new MLM head trains alone" not in output
    assert second["cloze.refresh.previous_champion_version"] == "1"
    assert "/pretrain/" in second["cloze.refresh.continued_from"]  # the champion's weights
