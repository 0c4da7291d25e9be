"""A throwaway PostgreSQL server on 127.0.0.1, set up as infra/ sets up its own.

Debian's packages put the server binaries in /usr/lib/postgresql/<version>/bin, off the PATH.
`initdb` refuses to run as root, so under root the cluster belongs to the `postgres` account
the package creates. Like the compose stack, the server takes password logins over TCP only
(scram-sha-256) for the user `cloze`, and infra/postgres/init-databases.sql creates the
`prefect` and `mlflow` databases.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.fakes import REPO
from tests.integration.servers import free_port

INIT_SQL = REPO / "infra" / "postgres" / "init-databases.sql"
USER = "cloze"


def postgres_bin() -> Path | None:
    """The newest installed server's bin directory, or None when no PostgreSQL is installed."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def missing_reason() -> str | None:
    """Why a PostgreSQL test cannot run here, or None when it can."""
    if postgres_bin() is None:
        return (
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb, no initdb on "
            "PATH); on Debian/Ubuntu: apt-get install postgresql"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and initdb needs an unprivileged `postgres` account"
    return None


def run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} exited with {done.returncode}: {done.stderr[-2000:]}")


@dataclass(frozen=True)
class Postgres:
    port: int
    password: str

    def url(self, database: str, driver: str = "postgresql") -> str:
        return f"{driver}://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"


@contextmanager
def postgres_server() -> Iterator[Postgres]:
    """A fresh cluster with the stack's databases; stopped and deleted at the end."""
    binaries = postgres_bin()
    assert binaries is not None, missing_reason()
    owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
    # Not under pytest's tmp_path: root's is private, and the server runs as `postgres`.
    home = Path(tempfile.mkdtemp(prefix="cloze-postgres-"))
    server = Postgres(free_port(), password="test-only-" + os.urandom(6).hex())
    try:
        (home / "password").write_text(server.password)
        if owner is not None:
            os.chown(home, owner.pw_uid, owner.pw_gid)
            os.chown(home / "password", owner.pw_uid, owner.pw_gid)

        def as_owner(*command: str) -> None:
            prefix = ["runuser", "-u", "postgres", "--"] if owner is not None else []
            run([*prefix, *command])

        as_owner(
            str(binaries / "initdb"),
            "-D",
            str(home / "data"),
            "-U",
            USER,
            "--auth-local=reject",
            "--auth-host=scram-sha-256",
            f"--pwfile={home / 'password'}",
        )
        options = f"-h 127.0.0.1 -p {server.port} -k {home}"
        as_owner(
            str(binaries / "pg_ctl"), "-D", str(home / "data"), "-o", options,
            "-l", str(home / "server.log"), "-w", "start",
        )  # fmt: skip
        try:
            psql = [str(binaries / "psql"), server.url("postgres"), "-v", "ON_ERROR_STOP=1"]
            run([*psql, "-f", str(INIT_SQL)])
            yield server
        finally:
            as_owner(str(binaries / "pg_ctl"), "-D", str(home / "data"), "-m", "fast", "stop")
    finally:
        shutil.rmtree(home, ignore_errors=True)
