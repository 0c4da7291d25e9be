"""A run's config is resolved once, where the run enters (flows/resolve.py): composed, the
checkpoint adopted and the whole validated; the flow and the stages read what it returned.

The counts below wrap the real functions (a spy that calls through), so the runs are real runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flows.__main__ import parse_args, resolve_runs
from flows.core.config import compose_config
from flows.core.settings import ConfigError
from flows.orchestration import flow_runs
from flows.orchestration.run_form import RunForm
from flows.resolve import ResolvedRun, resolve_run
from flows.stages import init_point
from tests.checkpoint_tokenizers import write_tokenizer
from tests.checkpoints import tiny_checkpoint


def counted(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[Any]:
    """Replaces `owner.name` by a spy that records each call's arguments and calls through."""
    real: Callable[..., Any] = getattr(owner, name)
    calls: list[Any] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return calls


@pytest.fixture
def services(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a run sets in the environment for its services is undone after the test."""
    monkeypatch.setattr(os, "environ", dict(os.environ))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ckpt") / "bert-tiny-medical"
    size = write_tokenizer(folder, "wordpiece")
    return tiny_checkpoint("bert", folder, vocab_size=size, scale=0.0)


def tokenizer_run(root: Path, corpus: Path, *overrides: str) -> list[str]:
    """A run through the tokenizer stage on `corpus`, kept under `root`."""
    return [
        "experiment=smoke",
        "corpus=files",
        f"corpus.paths=[{corpus}]",
        f"paths.root={root}",
        "shards.seq_len=64",  # within the tiny checkpoint's positions
        *overrides,
    ]


def test_a_checkpoint_is_adopted_once_per_run_where_it_enters_and_its_note_printed_once(
    checkpoint: Path,
    greek_corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    services: None,
) -> None:
    from flows.pipeline import pretraining_pipeline

    adoptions = counted(monkeypatch, init_point, "adopt_checkpoint")
    overrides = tokenizer_run(tmp_path, greek_corpus, f"pretrain.init_from={checkpoint}")
    (resolved,) = resolve_runs(parse_args([*overrides, "--until", "tokenizer"]))
    summary = pretraining_pipeline(resolved)
    assert len(adoptions) == 1  # the flow and its stages read the resolved run
    assert summary["stages"]["tokenizer"]["vocab_size"] == resolved.run.tokenizer.vocab_size
    assert caplog.text.count("pretrain.init_from: continuing the bert") == 1  # the flow prints


def test_a_flow_run_given_only_its_config_resolves_it_once(
    checkpoint: Path,
    greek_corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    services: None,
) -> None:
    """A flow run started with a config and nothing resolved in this process (the UI's "run
    again") goes through the same one function."""
    from flows import pipeline
    from flows.orchestration import handoff

    config = resolve_run(
        tokenizer_run(tmp_path, greek_corpus, f"pretrain.init_from={checkpoint}"), "tokenizer"
    ).config
    adoptions = counted(monkeypatch, init_point, "adopt_checkpoint")
    resolutions = counted(monkeypatch, handoff, "resolve_run")
    pipeline.pipeline_flow(config, "tokenizer")
    assert (len(resolutions), len(adoptions)) == (1, 1)


def test_a_served_run_resolves_once_to_the_run_config_the_cli_resolves(
    greek_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, services: None
) -> None:
    """Named, then run: the deployment's flow resolves its form once (its name needs the
    config too), to what `python -m flows` resolves from the same overrides."""
    from flows.deploy.entrypoints import pipeline_deployment

    resolutions = counted(monkeypatch, flow_runs, "resolve_run")
    started = counted(monkeypatch, flow_runs, "start_services")
    overrides = [f"paths.root={tmp_path}", "tokenizer.vocab_size=120"]
    summary = pipeline_deployment(
        experiment="smoke", until="tokenizer", corpus_paths=[str(greek_corpus)], overrides=overrides
    )
    assert summary["stages"]["tokenizer"]["cache_hit"] is False
    form = RunForm(
        experiment="smoke", until="tokenizer", corpus_paths=[str(greek_corpus)], overrides=overrides
    )
    (cli,) = resolve_runs(parse_args([*form.to_overrides(), "--until", "tokenizer"]))
    assert len(resolutions) == 1
    (served,) = started[0]
    assert served == cli.run


def test_a_bad_key_in_a_served_run_is_refused_with_the_key_named_before_its_services_start(
    monkeypatch: pytest.MonkeyPatch, services: None
) -> None:
    from flows.deploy.entrypoints import pipeline_deployment

    started = counted(monkeypatch, flow_runs, "start_services")
    state = pipeline_deployment(
        experiment="smoke", overrides=["trainer.max_stepz=5"], return_state=True
    )
    assert state.is_failed() and started == []
    assert state.message.startswith("unknown config key trainer.max_stepz; nearest valid keys")


def test_a_registered_checkpoint_is_adopted_once_by_the_pipeline_with_its_tracker(
    checkpoint: Path,
    greek_corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    services: None,
) -> None:
    from flows.core.paths import RunPaths
    from flows.pipeline import pretraining_pipeline
    from flows.plan import load_run_config
    from flows.tracking.runs import Tracker

    overrides = tokenizer_run(tmp_path, greek_corpus, "pretrain.init_from=models:/medical@base")
    run = load_run_config(compose_config(overrides))
    tracker = Tracker.for_run(run.tracking, RunPaths.from_settings(run.paths))
    logged = tracker.client.create_run(tracker.experiment_id)
    tracker.client.log_artifacts(logged.info.run_id, str(checkpoint), "model")
    tracker.client.create_registered_model("medical")
    source = f"{logged.info.artifact_uri}/model"
    version = tracker.client.create_model_version("medical", source, logged.info.run_id)
    tracker.client.set_registered_model_alias("medical", "base", version.version)
    adoptions = counted(monkeypatch, init_point, "adopt_checkpoint")
    summary = pretraining_pipeline(resolve_run(overrides, "tokenizer"))
    assert len(adoptions) == 1 and "checkpoint" in summary["stages"]  # imported, as a folder's
    assert caplog.text.count("pretrain.init_from: continuing the bert") == 1


def test_a_registry_uri_waits_for_the_tracker_and_a_bad_key_beside_it_still_fails_first() -> None:
    """Until the pipeline's tracker can look it up, a `models:/` run is the config as composed
    (validated, so a bad key still fails first) and says what it waits for."""
    waiting = resolve_run(["pretrain.init_from=models:/cloze@champion"], until=None)
    assert isinstance(waiting, ResolvedRun) and waiting.registry_uri == "models:/cloze@champion"
    with pytest.raises(ConfigError, match=r"^unknown config key model\.hidden_sise"):
        resolve_run(["pretrain.init_from=models:/cloze@champion", "model.hidden_sise=8"], None)
