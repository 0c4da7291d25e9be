"""The run's one Prefect artifact reads like the CLI summary: the verdict per task first, then
the stages as a table (issue 53, case 21: a "figures" column of about 40 raw `key value` pairs
per stage hid the result, and the headline sat in a second, near-identically named artifact)."""

from __future__ import annotations

from typing import Any

from flows.summary import render_summary, summary_markdown
from tests.fakes import finetune_outputs, grid_arm


def summary() -> dict[str, Any]:
    arms = {name: grid_arm(1e-3, [1e-3], [3, 4]) for name in ("pretrained", "random_init")}
    finetune = {**finetune_outputs(arms), "stage": "finetune", "key": "k1", "cache_hit": False}
    return {
        "stages": {"finetune": finetune},
        "experiment": "cloze",
        "mlflow_run_id": "r1",
        "mlflow_run_url": "http://127.0.0.1:5000/#/experiments/1/runs/r1",
        "tracking_uri": "sqlite:///mlflow.db",
    }


def test_the_artifact_leads_with_the_verdict_in_the_cli_summarys_words() -> None:
    markdown = summary_markdown(summary(), "finetune")
    lines = markdown.splitlines()
    assert lines[:3] == ["# Cloze pipeline (through `finetune`)", "", "## Verdict"]
    cli = render_summary(summary()).splitlines()
    verdict = next(line for line in cli if " accuracy over " in line).strip()
    assert lines[4] == f"- {verdict}"  # the task's verdict line, as the CLI prints it
    assert markdown.index("## Verdict") < markdown.index("## Stages")
    assert "| finetune | computed | 1 task(s), pretrained vs random init | `k1` |" in markdown
    assert "[r1](http://127.0.0.1:5000/#/experiments/1/runs/r1)" in markdown


def test_the_stages_table_holds_no_raw_key_value_dump() -> None:
    markdown = summary_markdown(summary(), "finetune")
    assert "lift_accuracy_bootstrap_low" not in markdown and "train_examples" not in markdown
    assert max(len(line) for line in markdown.splitlines()) < 200
