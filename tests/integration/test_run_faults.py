"""Faults a whole `python -m flows` run meets, through the real CLI: each ends in one `error:`
line with the documented exit code, publishes nothing it should not, and leaves no process."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from flows.tracking.links import run_role
from tests.integration.cli_runs import local_env, run_cli

pytestmark = pytest.mark.slow
SMOKE = ["experiment=smoke", "corpus.max_documents=300"]


def published(home: Path, stage: str) -> list[Path]:
    return list((home / "artifacts").glob(f"{stage}/[!.]*"))


def test_a_diverging_run_exits_3_and_publishes_nothing(tmp_path: Path) -> None:
    """`trainer.learning_rate=1000` gave a NaN loss from step 10, and the NaN model was
    published, registered and fine-tuned under the key a clean run uses."""
    home = tmp_path / "home"
    code, output = run_cli([*SMOKE, "trainer.learning_rate=1000"], local_env(home))
    assert code == 3, output[-4000:]
    [error] = [line for line in output.splitlines() if line.startswith("error:")]
    assert error.startswith("error: pretrain diverged at step "), error
    assert "If it diverges again: lower trainer.learning_rate=1000" in error
    assert "Nothing was published" in error
    assert "Traceback" not in output
    assert published(home, "pretrain") == [] and published(home, "finetune") == []
    client = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    assert client.search_registered_models() == []
    experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    statuses = {
        run_role(run.data.tags, run.info.run_name): run.info.status
        for run in client.search_runs(experiments)
    }
    assert statuses["pretrain"] == statuses["pipeline"] == "FAILED"


def unclosed_quote(path: Path) -> Path:
    rows = [f'{n},"row {n} of the corpus has enough words to keep"' for n in range(1, 401)]
    rows[10] = '11,"row 11 opens a quote it never closes'
    path.write_text("id,text\n" + "\n".join(rows) + "\n")
    return path


def test_a_csv_corpus_with_an_unclosed_quote_exits_2_naming_the_file(tmp_path: Path) -> None:
    corpus = unclosed_quote(tmp_path / "rows.csv")
    args = [*SMOKE, "corpus=files", f"corpus.paths=[{corpus}]"]
    code, output = run_cli(args, local_env(tmp_path / "home"))
    assert code == 2, output[-4000:]
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: {corpus}:12: the CSV record starting here cannot be parsed (',' expected after "
        "'\"'); an unclosed or stray \" is the usual cause: double quotes inside a quoted field "
        '(""), or set corpus.on_bad_rows=skip to count and drop such rows; a field may hold at '
        "most corpus.max_chars=1000000 characters"
    ], output[-4000:]
    assert "Traceback" not in output
