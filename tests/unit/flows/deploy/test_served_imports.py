"""A served run reaches its first stage without importing what only training needs.

Prefect's runner starts each served run in a fresh, spawned Python process that imports
flows/deploy/entrypoints.py before the flow begins; torch, Lightning, transformers and what they
pull in cost 5 to 10 s of imports there (docs/results/2026-12-03-served-start.md). The tokenizer
and shards stages need none of them: the stages that train import them when they run
(flows/stages/training_stages.py). scipy.sparse and pandas still come, with MLflow, which a run
needs before its first stage.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import import_module

import pytest

from tests.fakes import REPO

TRAINING_LIBRARIES = (
    "torch",
    "pytorch_lightning",
    "lightning",
    "lightning_fabric",
    "torchmetrics",
    "transformers",
    "sklearn",
    "sympy",
    "matplotlib",
    "scipy.stats",
)
# What a served run's process does up to its first two stages, outside Prefect: the imports, the
# config resolved (composed, adopted, validated, the task files checked: flows/resolve.py) and
# the plan built (what `run_stages` does before any stage), the MLflow store opened with the
# pipeline's run, then the tokenizer and shards stages, each in its child run. After each step:
# what of TRAINING_LIBRARIES is loaded.
PROBE = """
import json, sys
from pathlib import Path

LIBRARIES = {libraries!r}
root = Path(sys.argv[1])
loaded = {{}}

def step(name):
    loaded[name] = sorted(name for name in LIBRARIES if name in sys.modules)

import flows.deploy.entrypoints
step("import")

from flows.core.artifacts import ArtifactStore
from flows.core.config import compose_config
from flows.core.paths import RunPaths
from flows.plan import PipelinePlan
from flows.resolve import resolve_run
from flows.stages.shards.stage import build_shards
from flows.stages.tokenizer import train_tokenizer
from flows.tracking.runs import Tracker, final_status
from tests.fakes import greek_text, write_word_tasks

(root / "corpus.txt").write_text(greek_text(200))
config = compose_config(
    ["experiment=smoke", "corpus=files", f"corpus.paths=[{{root / 'corpus.txt'}}]",
     "tokenizer.vocab_size=100", "shards.seq_len=32", f"paths.root={{root / 'run'}}"]
)
config["finetune"]["catalog"].update(write_word_tasks(root))
config["finetune"].update(tasks=["pairs", "tags"], data_dir=str(root))
run = resolve_run(config).run
plan = PipelinePlan.from_run_config(run)
corpus = plan.open_corpus()
tracker = Tracker.for_run(plan.tracking, RunPaths.from_settings(run.paths))
tracker.close_stale_runs()
parent = tracker.start_run("pipeline")
step("plan")

store = ArtifactStore(root / "store")
tokenizer = tracker.record_stage(
    "tokenizer", lambda run: train_tokenizer(plan.tokenizer, corpus, store), parent
)
tracker.record_stage(
    "shards", lambda run: build_shards(plan.shards, corpus, tokenizer, store), parent
)
parent.finish(final_status(ValueError("a failed run is told from a stopped one")))
step("stages")
print(json.dumps(loaded))
"""


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The training libraries loaded after each step of a served run's start, in a fresh process
    as Prefect's runner starts one."""
    program = PROBE.format(libraries=TRAINING_LIBRARIES)
    root = tmp_path_factory.mktemp("served")
    result = subprocess.run(
        [sys.executable, "-c", program, str(root)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_importing_the_served_flow_loads_no_training_library(
    loaded: dict[str, list[str]],
) -> None:
    assert loaded["import"] == []


def test_composing_validating_and_planning_a_run_loads_no_training_library(
    loaded: dict[str, list[str]],
) -> None:
    """The task files are encoded (a stand-in tokenizer) and MLflow's store is opened, too."""
    assert loaded["plan"] == []


def test_the_tokenizer_and_shards_stages_load_no_training_library(
    loaded: dict[str, list[str]],
) -> None:
    assert loaded["stages"] == []


def test_each_training_stage_is_found_where_the_pipeline_looks_it_up() -> None:
    from flows.stages import training_stages

    for name, module in training_stages.HOMES.items():
        assert getattr(training_stages, name) is getattr(import_module(module), name)
    assert sorted(training_stages.HOMES) == sorted(training_stages.__all__)
    with pytest.raises(AttributeError, match="has no attribute 'pretrian'"):
        training_stages.pretrian  # type: ignore[attr-defined]  # noqa: B018


def test_lightnings_sigterm_still_marks_a_run_killed() -> None:
    """Tracking does not import Lightning to recognise its exception: once a training stage
    has loaded it, a SIGTERM that Lightning turned into its own exit is still a stop."""
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    from flows.tracking.runs import final_status

    assert final_status(SIGTERMException()) == "KILLED"
