"""The shards stage's per-file work on a real Dask cluster, through Prefect's DaskTaskRunner."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import pytest
from prefect import flow
from prefect.runtime import flow_run

from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.corpora import CorpusSettings, open_corpus
from flows.orchestration.shard_runners import prefect_unit_mapper
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, train_tokenizer
from tests.fakes import GREEK_LETTERS, greek_text

pytestmark = pytest.mark.slow


def write_corpus(directory: Path) -> Path:
    directory.mkdir()
    for index in range(4):
        text = greek_text(150, seed=3 + index, words=GREEK_LETTERS[:10], length=(6, 40))
        (directory / f"part-{index}.txt").write_text(text)
    return directory


@flow(name="shard-on-dask")
def shard_on_dask(
    settings: ShardSettings, corpus_dir: str, tokenizer: ArtifactRef, root: str
) -> tuple[ArtifactRef, str]:
    corpus = open_corpus(CorpusSettings(kind="files", paths=[corpus_dir]))
    ref = build_shards(
        settings, corpus, tokenizer, ArtifactStore(Path(root)), prefect_unit_mapper(settings)
    )
    return ref, str(flow_run.id)


def test_a_dask_local_cluster_gives_the_same_shards_as_a_local_run(tmp_path: Path) -> None:
    from distributed import LocalCluster
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    corpus_dir = write_corpus(tmp_path / "corpus")
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(corpus_dir)]))
    tokenizer = train_tokenizer(
        TokenizerSettings(vocab_size=120), corpus, ArtifactStore(tmp_path / "tokenizer")
    )
    local = build_shards(
        ShardSettings(seq_len=32), corpus, tokenizer, ArtifactStore(tmp_path / "local")
    )
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        settings = ShardSettings(
            seq_len=32, executor="dask", dask_address=cluster.scheduler_address, num_workers=2
        )
        on_dask, run_id = shard_on_dask(settings, str(corpus_dir), tokenizer, str(tmp_path / "d"))

    assert on_dask.key == local.key
    local_files = sorted(local.path.glob("*.bin"))
    assert len(local_files) >= 2
    for path in local_files:
        assert (on_dask.path / path.name).read_bytes() == path.read_bytes(), path.name

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(run_id)]))
        )
    units = [run for run in runs if run.name.startswith("encode-")]
    assert len(units) == 4 and all(run.state and run.state.is_completed() for run in units)
