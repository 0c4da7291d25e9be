"""Test isolation: Prefect and MLflow point at a throwaway directory before they are imported."""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_SESSION_HOME = Path(tempfile.mkdtemp(prefix="cloze-tests-"))
os.environ.pop("PREFECT_API_URL", None)
os.environ["PREFECT_HOME"] = str(_SESSION_HOME / "prefect")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
# As configure_services sets it: the default 20 s is too short for the temporary server to start
# on a loaded machine (seen: the fast suite's first pipeline test failed at a load average of 20).
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["DO_NOT_TRACK"] = "1"
os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{_SESSION_HOME / 'mlflow.db'}"

# Prefect logs "Stopping temporary server" from an atexit hook, after pytest has closed the
# captured streams; without this, every run ends with a harmless "I/O on closed file" traceback.
logging.raiseExceptions = False


# --- shared fixtures -------------------------------------------------------------------------

import pytest  # noqa: E402  (after the environment above: nothing may import Prefect first)

from tests.fakes import (  # noqa: E402
    FakeClock,
    WordShards,
    greek_text,
    word_paragraphs,
    write_word_tasks,
)


@pytest.fixture(scope="session")
def greek_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 paragraphs of 8 to 39 Greek letter names: a corpus every stage trains on in seconds."""
    path = tmp_path_factory.mktemp("greek") / "text.txt"
    path.write_text(greek_text(600, seed=0))
    return path


@pytest.fixture(autouse=True)
def input_warnings_said_afresh() -> None:
    """Each test is a run of its own: what an earlier one warned about is said again."""
    from flows.core.logs import new_run_warnings

    new_run_warnings()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def word_shards(tmp_path_factory: pytest.TempPathFactory) -> WordShards:
    """Tokenizer and shards of 300 paragraphs over the downstream tests' words, and their two
    task files: the finetune and lift-curve tests pretrain their tiny encoders on these."""
    from flows.core.artifacts import ArtifactStore
    from flows.corpora import open_corpus
    from flows.stages.shards.stage import build_shards
    from flows.stages.tokenizer import train_tokenizer
    from tests.fakes import composed

    root = tmp_path_factory.mktemp("words")
    (root / "corpus.txt").write_text(word_paragraphs(300))
    run = composed(
        "corpus=files",
        f"corpus.paths=['{root / 'corpus.txt'}']",
        "tokenizer.vocab_size=100",
        "shards.seq_len=32",
    )
    corpus = open_corpus(run.corpus)
    store = ArtifactStore(root / "store")
    tokenizer = train_tokenizer(run.tokenizer, corpus, store)
    shards = build_shards(run.shards, corpus, tokenizer, store)
    return WordShards(root, store, tokenizer, shards, write_word_tasks(root))


@pytest.fixture(scope="session")
def word_encoder(word_shards: WordShards) -> Any:
    """The tiny encoder pretrained on `word_shards` (a pretrain artifact) that the downstream
    tests fine-tune: one pretraining shared by every test that needs one."""
    from flows.stages.pretrain import pretrain
    from flows.stages.training_types import PretrainSettings
    from tests.fakes import TINY_ENCODER, TINY_TRAINER, composed

    return pretrain(
        PretrainSettings(TINY_ENCODER, composed().objective, TINY_TRAINER, 0),
        word_shards.shards,
        word_shards.tokenizer,
        word_shards.store,
    )


@contextmanager
def mounted_tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A tmpfs on `folder`; the test is skipped where mounting is not permitted."""
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)]).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


@pytest.fixture
def read_only_home(tmp_path: Path) -> Iterator[Path]:
    """A folder no process can write: a read-only tmpfs for root (whom permissions do not
    stop), else a folder without write permission."""
    if os.geteuid() == 0:
        with mounted_tmpfs(tmp_path / "home", "ro,size=1m") as home:
            yield home
        return
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o555)
    yield home
    home.chmod(0o755)
