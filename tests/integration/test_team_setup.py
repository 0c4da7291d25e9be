"""The team setup of infra/, run for real without Docker: PostgreSQL as the database of both the
Prefect server and the MLflow server, and two pipelines from two processes sharing one artifact
store.

The compose stack itself needs a Docker engine and an image registry. This test reads the
database settings out of infra/docker-compose.yml (drivers, variables, databases, password login
over TCP), points them at a PostgreSQL installed from the distribution's packages instead of the
`postgres` service, and runs the same programs with them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.fakes import REPO, run_twice_together
from tests.integration.postgres import Postgres, missing_reason, postgres_bin, postgres_server
from tests.integration.servers import mlflow_server, prefect_server

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason())),
]
TINY = ["experiment=smoke", "corpus.max_documents=800", "finetune.train_examples=200"]
COMPOSE = REPO / "infra" / "docker-compose.yml"
VARIABLE = re.compile(
    r"\$\{([A-Z_]+)(?::[-?]([^}]*))?\}"
)  # ${NAME}, ${NAME:-default}, ${NAME:?why}
SERVICE = "postgres:5432"  # how the stack's services reach the database


def compose_environment(service: str, server: Postgres) -> dict[str, str]:
    """`service`'s environment in infra/docker-compose.yml, with the variables filled in as
    infra/.env would and the `postgres` service replaced by `server`."""
    stack = yaml.safe_load(COMPOSE.read_text())
    given = {"POSTGRES_PASSWORD": server.password}

    def fill(value: str) -> str:
        value = VARIABLE.sub(lambda m: given.get(m[1], m[2] if m[2] is not None else ""), value)
        return value.replace(SERVICE, f"127.0.0.1:{server.port}")

    return {
        name: fill(str(value)) for name, value in stack["services"][service]["environment"].items()
    }


def prefect_database(server: Postgres) -> dict[str, str]:
    """prefect-server's `PREFECT_SERVER_DATABASE_*` settings from the compose file."""
    environment = compose_environment("prefect-server", server)
    settings = {k: v for k, v in environment.items() if k.startswith("PREFECT_SERVER_DATABASE_")}
    host = ("PREFECT_SERVER_DATABASE_HOST", "PREFECT_SERVER_DATABASE_PORT")
    assert (settings[host[0]], settings[host[1]]) == tuple(SERVICE.split(":"))
    return {**settings, host[0]: "127.0.0.1", host[1]: str(server.port)}


def mlflow_database(server: Postgres) -> str:
    """mlflow's `MLFLOW_BACKEND_STORE_URI` from the compose file."""
    return compose_environment("mlflow", server)["MLFLOW_BACKEND_STORE_URI"]


def query(server: Postgres, database: str, sql: str) -> str:
    psql = postgres_bin()
    assert psql is not None
    done = subprocess.run(
        [str(psql / "psql"), server.url(database), "-At", "-c", sql],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_two_pipelines_share_one_store_against_servers_on_postgres(tmp_path: Path) -> None:
    (tmp_path / "mlflow").mkdir()
    with (
        postgres_server() as database,
        prefect_server(tmp_path / "prefect", database=prefect_database(database)) as api,
        mlflow_server(tmp_path / "mlflow", mlflow_database(database)) as uri,
    ):
        env = {**os.environ, "PREFECT_API_URL": api, "CLOZE_TRACKING_URI": uri}
        env.pop("PREFECT_HOME", None)
        command = [sys.executable, "-m", "flows", *TINY, f"paths.root={tmp_path / 'team'}"]
        run_twice_together([*command, "tracking.experiment=team"], env, timeout=900)

        from prefect.client.orchestration import SyncPrefectClient

        with SyncPrefectClient(api) as client:
            states = [run.state.name for run in client.read_flow_runs() if run.state]
        assert states == ["Completed", "Completed"]
        assert query(database, "prefect", "SELECT count(*) FROM flow_run") == "2"

        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("team")
        runs_found = client.search_runs([experiment.experiment_id])
        parents = [run for run in runs_found if "mlflow.parentRunId" not in run.data.tags]
        assert len(parents) == 2 and all(run.info.status == "FINISHED" for run in parents)
        stored = query(database, "mlflow", "SELECT count(*) FROM runs WHERE status = 'FINISHED'")
        assert int(stored) == len(runs_found)
    assert not (tmp_path / "team" / "prefect").exists()  # the server, not local mode, was used
    assert not list((tmp_path / "team" / "artifacts").glob("*/.corrupt-*"))
