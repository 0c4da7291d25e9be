"""`python -m flows.deploy serve | register --pool NAME`: the Cloze deployments on a Prefect server.

`serve` registers every enabled deployment of `conf/deploy/<config>.yaml` and runs their flow
runs from this process (local use: no work pool, no worker). `register` registers the same
deployments to a work pool, with this checkout as their source, for a worker to run. Both set
the tag concurrency limit that keeps training tasks from running more than N at a time.

Ctrl-C on `serve` ends like SIGTERM: Prefect's runner cancels the flow runs in progress (each
gets SIGTERM: its run Cancelled, its task runs ended, its MLflow runs KILLED, its concurrency
slots released), then `serve` marks its deployments as not served (flows/deploy/served.py) and
exits with 130.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import signal
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flows.core.cli import fail
from flows.core.config import CONF_DIR
from flows.core.logs import PROJECT_LOGGERS
from flows.core.paths import REPO_ROOT
from flows.core.settings import ConfigError
from flows.deploy.served import mark_not_served, stopped_line
from flows.deploy.settings import DEPLOYMENTS, DeploymentSettings, DeploySettings

ENTRYPOINTS = {
    "pipeline": "flows/deploy/entrypoints.py:pipeline_deployment",
    "refresh": "flows/refresh/flow.py:domain_refresh",
    "evaluate": "flows/evaluate/flow.py:evaluate_deployment",
}
TAGS = ["cloze"]
SERVE_HELP = """Registers every enabled deployment of conf/deploy/<config>.yaml and runs their flow
runs from this process (local use: no work pool, no worker), until Ctrl-C (exit 130): the runs
in progress are cancelled first. `cloze deploy register --pool NAME` registers them to a work
pool instead."""
# How long `serve` and `register` wait for the server's health check before saying it is down.
HEALTH_TIMEOUT_SECONDS = 5
RUNNER_POLL_SECONDS = 1


def parse_args(
    argv: list[str], prog: str = "python -m flows.deploy", command: str | None = None
) -> argparse.Namespace:
    """`command` fixed (`cloze serve`): its options alone, with no subcommand to name."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__ if command is None else SERVE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config", default="default", help="conf/deploy/CONFIG.yaml, or a path to a YAML file"
    )
    if command is not None:
        return argparse.Namespace(**vars(parser.parse_args(argv)), command=command)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("serve", help="register the deployments and run them from here")
    register = commands.add_parser("register", help="register the deployments to a work pool")
    register.add_argument("--pool", required=True, help="work pool name, e.g. cloze-process")
    register.add_argument(
        "--source", default=str(REPO_ROOT), help="code location the worker pulls (default: here)"
    )
    return parser.parse_args(argv)


def config_path(config: str) -> Path:
    """`--config`: a name under conf/deploy/, or a YAML file's path."""
    if config.endswith((".yaml", ".yml")):
        return Path(config).expanduser()
    return CONF_DIR / "deploy" / f"{config}.yaml"


def check_overrides(settings: DeploySettings) -> None:
    """Each deployment's default overrides compose into a valid config, so a scheduled run
    cannot fail on them (a typo'd key among them is named here, not at 2 a.m.)."""
    from flows.resolve import resolve_run

    for name, item in settings.enabled().items():
        try:
            resolve_run(item.overrides, until=None)  # no stage runs here: no task file read
        except ConfigError as error:
            raise ConfigError(f"deployments.{name}.overrides: {error}") from error


# A server that asks for credentials still is one: the client may hold them.
AUTH_STATUSES = (401, 403)


def check_server(api: str) -> None:
    """Fails in seconds when no Prefect API answers at `api`: Prefect's client retried for
    77 s, then printed a 78-line connection traceback."""
    health = f"{api.rstrip('/')}/health"
    try:
        with urllib.request.urlopen(health, timeout=HEALTH_TIMEOUT_SECONDS):
            return
    except urllib.error.HTTPError as error:
        if error.code in AUTH_STATUSES:
            return
        raise ConfigError(
            f"PREFECT_API_URL={api} is not a Prefect server's API: {health} answers HTTP "
            f"{error.code}; a Prefect API URL ends in /api (`prefect server start` serves "
            "http://127.0.0.1:4200/api)"
        ) from None
    except (OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise ConfigError(
            f"no Prefect server answers at PREFECT_API_URL={api} ({reason}); start one with "
            "`prefect server start` (it serves http://127.0.0.1:4200/api) or point "
            "PREFECT_API_URL at yours"
        ) from None


def quoted_lists(override: str) -> str:
    """`corpus.paths=[/data/legal]` -> `corpus.paths=['/data/legal']`: the same to Hydra, and
    no markup to rich. `prefect deployment run` prints a run's parameters as rich markup, where
    `[/data/legal]` is a closing tag: it crashed (MarkupError) after creating the run, and
    `[sst2]` vanished as an opening one. Other overrides are kept as written."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        (parsed,) = OverridesParser.create().parse_overrides([override])
    except HydraException:
        return override  # compose_config names the error when the deployment is checked
    value = parsed.value()
    scalars = (str, int, float, bool, type(None))
    if not isinstance(value, list) or not all(isinstance(item, scalars) for item in value):
        return override
    if any(isinstance(item, str) and "\\" in item for item in value):
        return override

    def element(item: Any) -> str:
        if isinstance(item, str):
            return "'" + item.replace("'", "\\'") + "'"
        if isinstance(item, bool) or item is None:
            return {True: "true", False: "false", None: "null"}[item]
        return str(item)

    key = override.split("=", 1)[0]
    return f"{key}=[{','.join(element(item) for item in value)}]"


def deployment_options(name: str, item: DeploymentSettings) -> dict[str, Any]:
    """What `to_deployment` and `deploy` share: parameters, schedule, tags."""
    from prefect.schedules import Cron

    parameters: dict[str, Any] = {"overrides": [quoted_lists(entry) for entry in item.overrides]}
    until = DEPLOYMENTS[name]
    if until is not None:
        parameters["until"] = until
    return {
        "name": name,
        "parameters": parameters,
        "schedules": [Cron(item.cron, timezone=item.timezone)] if item.cron else None,
        "tags": [*TAGS, name],
        "description": description(name),
    }


def description(name: str) -> str:
    """What the deployment's form holds, read from its flow's parameters: a hand-written list
    promised `domain-refresh` a form (model, corpus, steps, tasks) it does not have."""
    fields = [field for field in form_fields(name) if field != "overrides"]
    return f"Cloze {name}: a typed run form ({', '.join(fields)}) plus raw Hydra overrides"


def form_fields(name: str) -> list[str]:
    """The parameters of the flow a deployment runs: the fields of its form, in order."""
    return list(inspect.signature(flow_of(name).fn).parameters)


def with_timeout(flow_object: Any, item: DeploymentSettings) -> Any:
    if item.timeout_hours is None:
        return flow_object
    return flow_object.with_options(timeout_seconds=item.timeout_hours * 3600)


def serve(settings: DeploySettings) -> int:
    """Serves until stopped; the exit code: 0, or 130 after Ctrl-C."""
    from prefect import serve as serve_deployments

    deployments = [
        with_timeout(flow_of(name), item).to_deployment(**deployment_options(name, item))
        for name, item in settings.enabled().items()
    ]
    stopped = stop_like_sigterm_on_ctrl_c()
    with flow_runs_immune_to_ctrl_c():
        serve_deployments(*deployments)
    names = [f"{deployment.flow_name}/{deployment.name}" for deployment in deployments]
    try:
        check_server(os.environ["PREFECT_API_URL"])
    except ConfigError:
        marked = False  # the server went first: nothing to tell, and no minute of retries
    else:
        marked = mark_not_served(names)
    print(stopped_line(names, marked), flush=True)
    return 128 + signal.SIGINT if stopped else 0


def stop_like_sigterm_on_ctrl_c() -> list[int]:
    """Turns the first SIGINT into a SIGTERM to this process, which Prefect's runner handles
    by cancelling its flow runs and stopping; a second SIGINT acts as the default. Returns the
    list the SIGINT is noted in.

    Prefect's own SIGINT path (a KeyboardInterrupt out of the event loop) stopped the runner
    without cancelling: the flow run and its pretrain task stayed Running for good, and its
    MLflow runs RUNNING until a later run marked them KILLED.
    """
    received: list[int] = []

    def on_ctrl_c(signum: int, frame: object) -> None:
        received.append(signum)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("Ctrl-C: cancelling the flow runs in progress, then stopping (Ctrl-C again to force)")
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGINT, on_ctrl_c)
    return received


@contextmanager
def flow_runs_immune_to_ctrl_c() -> Iterator[None]:
    """Flow runs start with SIGINT blocked, so only `serve` reacts to Ctrl-C.

    A terminal sends Ctrl-C to its whole foreground process group, flow-run processes
    included: interrupted on their own, they died before reporting. Blocked, the signal stays
    pending in them; the runner ends them with SIGTERM, their orderly path. A blocked signal's
    mask is inherited by a spawned process and kept across `exec`. Prefect's direct starter
    names `run_flow_in_subprocess` as the place to change how a flow run is started.
    """
    from prefect.runner import _starter_direct

    spawn: Callable[..., Any] = _starter_direct.run_flow_in_subprocess

    def spawn_blocking_sigint(*args: Any, **kwargs: Any) -> Any:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:  # the child inherits the mask of the thread that starts it
            return spawn(*args, **kwargs)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    _starter_direct.run_flow_in_subprocess = spawn_blocking_sigint
    try:
        yield
    finally:
        _starter_direct.run_flow_in_subprocess = spawn


def entrypoint_of(name: str) -> str:
    if name in ENTRYPOINTS:
        return ENTRYPOINTS[name]
    return ENTRYPOINTS["pipeline" if DEPLOYMENTS[name] else "refresh"]


def flow_of(name: str) -> Any:
    """The flow object a deployment runs, imported by the entrypoint a worker loads it from: the
    deploy package names the flows it deploys and imports none of their packages (the domain
    refresh's among them) at module level."""
    path, attribute = entrypoint_of(name).split(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    return getattr(module, attribute)


def register(settings: DeploySettings, pool: str, source: str) -> None:
    """From source: the worker loads the flows from `source` (a path it can read, or a git URL).

    A worker loads the flow from its entrypoint, so `timeout_hours` (a flow option) applies
    only to served deployments; a registered one takes the flow's own options.
    """
    from prefect import Flow

    for name, item in settings.enabled().items():
        remote: Any = Flow.from_source(source=source, entrypoint=entrypoint_of(name))  # sync here
        remote.deploy(
            work_pool_name=pool, build=False, push=False, print_next_steps=False,
            **deployment_options(name, item),
        )  # fmt: skip
        print(f"registered {remote.name}/{name} to work pool {pool}")


def set_training_limit(settings: DeploySettings) -> None:
    from prefect import get_client

    from flows.pipeline import TRAINING_TAG

    if settings.training_concurrency is None:
        return
    with get_client(sync_client=True) as client:
        client.create_concurrency_limit(
            tag=TRAINING_TAG, concurrency_limit=settings.training_concurrency
        )
    print(f"at most {settings.training_concurrency} '{TRAINING_TAG}' task(s) at a time")


def serve_main(argv: list[str], prog: str = "cloze serve") -> int:
    """`cloze serve`: `serve` with its own usage line (`cloze serve [-h] [--config CONFIG]`)."""
    return main(argv, prog, command="serve")


def main(argv: list[str], prog: str = "python -m flows.deploy", command: str | None = None) -> int:
    args = parse_args(argv, prog, command)
    if not os.environ.get("PREFECT_API_URL"):
        return fail(
            "set PREFECT_API_URL to a Prefect server (e.g. `prefect server start`, then "
            "PREFECT_API_URL=http://127.0.0.1:4200/api); deployments need one"
        )
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", ",".join(PROJECT_LOGGERS))
    # How often `serve` asks the server for runs to start: Prefect's 10 s default is on average
    # 5 s of a served run's start before anything runs; every second costs the server one light
    # query per serve process (docs/results/2026-12-03-served-start.md).
    os.environ.setdefault("PREFECT_RUNNER_POLL_FREQUENCY", str(RUNNER_POLL_SECONDS))
    try:
        check_server(os.environ["PREFECT_API_URL"])  # first: seconds, before composing configs
        settings = DeploySettings.load(config_path(args.config))
        check_overrides(settings)
    except ConfigError as error:
        return fail(error)
    set_training_limit(settings)
    if args.command == "register":
        register(settings, args.pool, args.source)
        return 0
    return serve(settings)
