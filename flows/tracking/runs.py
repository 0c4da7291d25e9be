"""MLflow tracking through explicit run ids: a parent run per pipeline, a child run per stage.

The fluent `mlflow.start_run` API keeps the active run in thread-local state, which breaks when
Prefect runs tasks on worker threads; passing run ids around works in every execution mode.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import psutil
from mlflow.artifacts import download_artifacts
from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from flows.core.artifacts import ArtifactRef, file_lock
from flows.core.paths import RunPaths
from flows.core.redaction import redact_text
from flows.core.settings import ConfigError
from flows.core.signals import stop_signals_deferred
from flows.tracking.links import (
    CUSTOM_MODEL_DEVELOPMENT,
    EXPERIMENT_KIND_TAG,
    ROLE_TAG,
    RunIdentity,
    mlflow_experiment_url,
    mlflow_run_url,
)
from flows.tracking.retry import RetryingClient, RetryPolicy, is_insert_race
from flows.tracking.settings import TrackingSettings

MAX_PARAM_LENGTH = 6000
log = logging.getLogger(__name__)
BATCH_LIMIT = 100
PARENT_TAG = "mlflow.parentRunId"
ARTIFACT_KEY_TAG = "cloze.artifact_key"
ARTIFACT_PATH_TAG = "cloze.artifact_path"
OWNER_TAG = "cloze.owner"  # the process that started a run: host:pid:start time
# On a continued pretraining run: the steps its starting model had already trained.
STEP_OFFSET_TAG = "cloze.step_offset"
MISSING_CODES = ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE")
MODEL_URI = re.compile(r"models:/(?P<name>[^/@]+)(?:@(?P<alias>[\w-]+)|/(?P<version>\d+))")


def process_owner(pid: int | None = None) -> str:
    """`host:pid:start time`: the start time tells a reused pid from the process that ran."""
    process = psutil.Process(pid)
    return f"{socket.gethostname()}:{process.pid}:{process.create_time():.2f}"


def owner_is_gone(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid, _, _started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        return process_owner(int(pid)) != owner
    except psutil.NoSuchProcess:
        return True


_STOP_SIGNALS: list[int] = []  # signals the CLI received (flows/__main__.py)


def note_stop_signal(signum: int) -> None:
    """Called from the CLI's signal handler: runs that end from now on end as KILLED."""
    _STOP_SIGNALS.append(signum)


def received_stop_signal() -> int | None:
    """The first signal the CLI was stopped by, if any."""
    return _STOP_SIGNALS[0] if _STOP_SIGNALS else None


def final_status(error: BaseException) -> str:
    """KILLED for a signal or Ctrl-C, else FAILED.

    Lightning handles SIGTERM and KeyboardInterrupt itself and exits with its own exception, so
    the signal is recorded when it arrives rather than read from the exception alone.
    """
    if _STOP_SIGNALS:
        return "KILLED"
    # Imported here: importing Prefect freezes its settings, and the CLI imports this module
    # before `configure_services` sets them (PREFECT_CLIENT_MAX_RETRIES, PREFECT_HOME, ...).
    from prefect.exceptions import ExternalSignal

    # Prefect raises TerminationSignal on SIGTERM during a flow run (and re-sends the signal to
    # the CLI's handler afterwards); Lightning raises SIGTERMException, and exits on Ctrl-C.
    stopped_by_signal: tuple[type[BaseException], ...] = (
        KeyboardInterrupt,
        ExternalSignal,
        *lightning_stop_errors(),
    )
    current: BaseException | None = error
    for _ in range(20):
        if current is None:
            break
        if isinstance(current, stopped_by_signal):
            return "KILLED"
        current = current.__cause__ or current.__context__
    return "FAILED"


def lightning_stop_errors() -> tuple[type[BaseException], ...]:
    """Lightning's exception for a SIGTERM, if Lightning is loaded: a process that never imported
    it (a run stopped before training) cannot have raised it, and need not import it to ask."""
    module = sys.modules.get("pytorch_lightning.utilities.exceptions")
    return () if module is None else (module.SIGTERMException,)


def masked(tags: Mapping[str, Any]) -> dict[str, str]:
    """Tag values as MLflow stores them, URI credentials masked (flows/core/redaction.py)."""
    return {key: redact_text(str(value)) for key, value in tags.items()}


def flatten(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """`{"a": {"b": 1}}` -> `("a.b", 1)`: MLflow params are flat."""
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{name}.")
        else:
            yield name, value


@dataclass(frozen=True)
class RunPages:
    """Where a run shows in the MLflow UI, said when it ends (MLflow's own lines are switched
    off: they open the GenAI view, see flows/tracking/links.py)."""

    name: str
    run: str
    experiment: str | None = None  # said for a top-level run only

    def announce(self) -> None:
        log.info("View run %s at: %s", self.name, self.run)
        if self.experiment is not None:
            log.info("View experiment at: %s", self.experiment)


@dataclass(frozen=True)
class DataInput:
    """Data a run read, as MLflow's Dataset column shows it and its search filters it
    (`dataset.digest = '<key>'`): the digest is the content key (a shards artifact's key, a task
    file's sha256 to 20 hex digits, as the store's keys), the source the path read."""

    name: str
    digest: str
    source: Path
    context: str  # `training`, or a task file's split


# MLflow's tag for what a dataset was used as (training, validation, test).
CONTEXT_TAG = "mlflow.data.context"


class RunHandle:
    def __init__(
        self,
        client: MlflowClient,
        run_id: str,
        tracking_uri: str,
        stage: str = "",
        pages: RunPages | None = None,
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.tracking_uri = tracking_uri
        self.stage = stage  # the run's role: `finetune-challenger` (flows/tracking/links.py)
        self.pages = pages  # None: a local store, which no server shows

    def log_params(self, params: Mapping[str, Any]) -> None:
        entries = [
            Param(key, redact_text(str(value))[:MAX_PARAM_LENGTH]) for key, value in flatten(params)
        ]
        for start in range(0, len(entries), BATCH_LIMIT):
            self.client.log_batch(self.run_id, params=entries[start : start + BATCH_LIMIT])

    def log_metrics(self, metrics: Mapping[str, Any], step: int = 0) -> None:
        now = int(time.time() * 1000)
        entries = [
            Metric(key, float(value), now, step)
            for key, value in flatten(metrics)
            if isinstance(value, int | float) and not isinstance(value, bool)
        ]
        for start in range(0, len(entries), BATCH_LIMIT):
            self.client.log_batch(self.run_id, metrics=entries[start : start + BATCH_LIMIT])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in masked(tags).items()])

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, redact_text(text), artifact_file)

    def log_table(self, columns: Mapping[str, list[Any]], artifact_file: str) -> None:
        """A table artifact (JSON) that MLflow's UI shows as a table, one list per column."""
        self.client.log_table(self.run_id, dict(columns), artifact_file)

    def log_inputs(self, inputs: Sequence[DataInput]) -> None:
        """The run's data, in MLflow's Dataset column; a source is a local path (`local`)."""
        if not inputs:  # a built-in task reads no file
            return
        datasets = [
            DatasetInput(
                Dataset(item.name, item.digest, "local", json.dumps({"uri": str(item.source)})),
                [InputTag(CONTEXT_TAG, item.context)],
            )
            for item in inputs
        ]
        try:
            self.client.log_inputs(self.run_id, datasets)
        except MlflowException as error:
            if not is_insert_race(error):
                raise
            self.client.log_inputs(self.run_id, datasets)  # the rival's row is there: link to it

    def record_artifact(self, ref: ArtifactRef) -> None:
        """What a stage produced, whether it was computed now or reused from the store."""
        self.set_tags(
            {
                "cloze.cache_hit": str(ref.cache_hit).lower(),
                ARTIFACT_KEY_TAG: ref.key,
                ARTIFACT_PATH_TAG: str(ref.path),
            }
        )
        self.log_metrics(ref.outputs)

    def log_artifacts(self, directory: Path, artifact_path: str) -> None:
        self.client.log_artifacts(self.run_id, str(directory), artifact_path)

    def finish(self, status: str = "FINISHED") -> None:
        """Ends the run; a stop signal arriving meanwhile waits for the status to be written."""
        with stop_signals_deferred():
            self.client.set_terminated(self.run_id, status=status)
        if self.pages is not None:
            self.pages.announce()

    def lightning_logger(self, prefix: str = "") -> Any:
        """Lightning's logger onto this run, for a training stage: Lightning is imported then,
        not with tracking, which every run's process imports before its first stage."""
        from flows.tracking.lightning_logger import RunLogger

        logger = RunLogger(tracking_uri=self.tracking_uri, run_id=self.run_id, prefix=prefix)
        # Lightning builds a bare MlflowClient; swap in ours so training-time logging follows
        # the same retry policy and fails with the same clear error.
        logger._mlflow_client = self.client
        return logger


@contextmanager
def store_setup_lock(tracking_uri: str) -> Iterator[None]:
    """Serialises first use of a local SQLite store across processes.

    MLflow creates and migrates its schema on first use; two pipelines starting together on a
    fresh store otherwise race in that migration and one fails (seen with two concurrent runs).
    """
    if not tracking_uri.startswith("sqlite:///"):
        yield
        return
    lock_path = Path(tracking_uri.removeprefix("sqlite:///") + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(lock_path):
        yield


class Tracker:
    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        artifact_root: Path | None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.identity = RunIdentity()  # set by the flow: run names and Prefect links
        # Where registered checkpoints without a pretrain artifact here are downloaded to.
        self.downloads = Path(tempfile.gettempdir()) / "cloze-downloads"
        with store_setup_lock(tracking_uri):
            client = RetryingClient.connect(tracking_uri, retry or RetryPolicy())
            self.client = cast(MlflowClient, client)  # a proxy with MlflowClient's interface
            self.experiment_id = self._experiment_id(experiment, artifact_root)

    def _experiment_id(self, experiment: str, artifact_root: Path | None) -> str:
        found = self.client.get_experiment_by_name(experiment)
        if found is not None:
            if found.tags.get(EXPERIMENT_KIND_TAG) is None:  # created before the tag existed
                self.client.set_experiment_tag(
                    found.experiment_id, EXPERIMENT_KIND_TAG, CUSTOM_MODEL_DEVELOPMENT
                )
            return str(found.experiment_id)
        location = (artifact_root / experiment).as_uri() if artifact_root else None
        try:
            return str(
                self.client.create_experiment(
                    experiment, location, tags={EXPERIMENT_KIND_TAG: CUSTOM_MODEL_DEVELOPMENT}
                )
            )
        except MlflowException as error:  # another process created it first
            if error.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            created = self.client.get_experiment_by_name(experiment)
            assert created is not None, f"experiment {experiment!r} exists but cannot be read"
            return str(created.experiment_id)

    @classmethod
    def for_run(cls, settings: TrackingSettings, paths: RunPaths) -> Tracker:
        """The configured server, or the SQLite store under the run root (artifacts beside it)."""
        uri = paths.tracking_uri(settings.uri)
        artifact_root = paths.mlflow_artifacts if uri.startswith("sqlite:") else None
        tracker = cls(uri, settings.experiment, artifact_root, settings.retry_policy())
        tracker.downloads = paths.root / "downloads"
        return tracker

    def start_run(
        self,
        name: str,
        parent: RunHandle | None = None,
        tags: Mapping[str, str] | None = None,
        title: str | None = None,
    ) -> RunHandle:
        """A run whose role is `name` (tag `cloze.run`), tagged with the Prefect run it belongs
        to. A top-level run takes the flow run's name; a child, `title` or what its role says
        (flows/tracking/links.py)."""
        all_tags = {OWNER_TAG: process_owner(), **self.identity.tags, **(tags or {})}
        all_tags[ROLE_TAG] = name
        if parent is not None:
            all_tags[PARENT_TAG] = parent.run_id
        run_name = self.identity.run_name(name, parent is None, title)
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=masked(all_tags))
        run_id = run.info.run_id
        pages = None
        if self.tracking_uri.startswith("http"):  # as MLflow: a server's runs have pages
            experiment = self.experiment_url() if parent is None else None
            pages = RunPages(run_name, self.run_url(run_id), experiment)
        return RunHandle(self.client, run_id, self.tracking_uri, name, pages)

    def run_url(self, run_id: str) -> str:
        return mlflow_run_url(self.tracking_uri, self.experiment_id, run_id)

    def experiment_url(self) -> str:
        return mlflow_experiment_url(self.tracking_uri, self.experiment_id)

    def close_stale_runs(self) -> list[str]:
        """Marks KILLED the runs left RUNNING by a process of this host that no longer exists.

        A SIGKILL or a power cut gives Python no chance to close its runs; the next run on the
        same store does it. Runs of live processes (a concurrent run) and of other hosts are
        left alone: only their owner can tell whether they still run.
        """
        running = self.client.search_runs(
            [self.experiment_id], filter_string="attributes.status = 'RUNNING'", max_results=1000
        )
        closed = []
        for run in running:
            owner = run.data.tags.get(OWNER_TAG)
            if owner is not None and owner_is_gone(owner):
                self.client.set_terminated(run.info.run_id, "KILLED")
                closed.append(run.info.run_id)
        if closed:
            log.warning("marked %d run(s) KILLED that a killed process left RUNNING", len(closed))
        return closed

    def record_stage(
        self,
        stage: str,
        produce: Callable[[RunHandle], ArtifactRef],
        parent: RunHandle | None = None,
        tags: Mapping[str, str] | None = None,
        label: str | None = None,
        title: str | None = None,
    ) -> ArtifactRef:
        """Runs `produce` inside a run that records the artifact, computed or reused.

        `label` is the run's role when one flow runs a stage twice (`finetune-challenger`);
        `title` its name, where it says more than the role (`pretrain seed 0`).

        The run is marked FAILED (KILLED for a signal) on any exit but success, so a killed
        stage never stays RUNNING in the UI when Python gets the chance to say so.
        """
        stage_tags = {"cloze.stage": stage, **(tags or {})}
        run = self.start_run(label or stage, parent, stage_tags, title)
        try:
            ref = produce(run)
        except BaseException as error:
            run.finish(final_status(error))
            raise
        run.record_artifact(ref)
        run.finish()
        return ref

    def register_model(
        self,
        name: str,
        run: RunHandle,
        artifact_path: str,
        tags: Mapping[str, str] | None = None,
        description: str | None = None,
    ) -> str:
        """Registers `artifact_path` of `run` as a new version of `name`; returns the version."""
        try:
            self.client.create_registered_model(name)
        except MlflowException as error:
            if error.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        source = f"{self.client.get_run(run.run_id).info.artifact_uri}/{artifact_path}"
        version = self.client.create_model_version(
            name,
            source,
            run_id=run.run_id,
            tags=masked(tags or {}),
            description=redact_text(description) if description else description,
        )
        return str(version.version)

    def describe_version(
        self, name: str, version: str, tags: Mapping[str, Any], note: str | None = None
    ) -> None:
        """Tags on a registry version, and `note` appended to its description."""
        for key, value in masked(tags).items():
            self.client.set_model_version_tag(name, version, key, value)
        if note:
            current = self.client.get_model_version(name, version).description or ""
            description = redact_text(f"{current}\n{note}" if current else note)
            self.client.update_model_version(name, version, description=description)

    def set_alias(self, name: str, alias: str, version: str) -> None:
        """Points `name@alias` at `version` (moving it from any other version)."""
        self.client.set_registered_model_alias(name, alias, version)

    def version_by_alias(self, name: str, alias: str) -> ModelVersion | None:
        """`name@alias`, or None when the model or the alias does not exist yet."""
        try:
            return self.client.get_model_version_by_alias(name, alias)
        except MlflowException as error:
            if error.error_code in MISSING_CODES:
                return None
            raise

    def version_for_artifact(self, name: str, artifact_key: str) -> ModelVersion | None:
        """The version of `name` registered for a pretrain artifact (tag `cloze.artifact_key`)."""
        try:
            versions = self.client.search_model_versions(f"name = '{name}'")
        except MlflowException as error:
            if error.error_code in MISSING_CODES:
                return None
            raise
        matches = [v for v in versions if v.tags.get(ARTIFACT_KEY_TAG) == artifact_key]
        return max(matches, key=lambda v: int(v.version), default=None)

    def steps_before(self, start: ArtifactRef) -> int:
        """Pretraining steps behind the pretrain artifact `start`: its own, plus those of the
        model it continued from (the offset recorded on the run that trained it)."""
        trained = self.client.search_runs(
            [self.experiment_id],
            f"tags.`{ARTIFACT_KEY_TAG}` = '{start.key}' AND tags.`cloze.cache_hit` = 'false' "
            "AND tags.`cloze.stage` = 'pretrain'",
            max_results=1,
        )
        offset = int(trained[0].data.tags.get(STEP_OFFSET_TAG, 0)) if trained else 0
        return offset + int(start.outputs.get("steps", 0))

    def resolve_model_uri(self, uri: str) -> Path:
        """`models:/name@alias` or `models:/name/version` -> the weights behind it.

        A version Cloze registered records its pretrain artifact's path in this store (tag
        `cloze.artifact_path`): continuing from it needs that store. Otherwise (another
        machine's store, or a checkpoint someone registered by hand) the version's own files are
        downloaded under the run root's `downloads/`: a `transformers` folder, imported like any
        other.
        """
        match = MODEL_URI.fullmatch(uri)
        if match is None:
            raise ConfigError(f"{uri!r} is not models:/<name>@<alias> or models:/<name>/<version>")
        name, alias, number = match.group("name", "alias", "version")
        version = (
            self.version_by_alias(name, alias)
            if alias
            else self.client.get_model_version(name, number)
        )
        if version is None:
            raise ConfigError(f"{uri}: the registered model {name!r} has no alias {alias!r}")
        path = version.tags.get(ARTIFACT_PATH_TAG)
        if path and Path(path).is_dir():
            return Path(path)
        download_root = self.downloads
        target = download_root / f"{name}-{version.version}"
        if not target.is_dir():  # a version's files never change: one download serves all runs
            download_root.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=download_root))
            download_artifacts(
                artifact_uri=version.source, dst_path=str(partial), tracking_uri=self.tracking_uri
            )
            try:
                partial.rename(target)
            except OSError:  # a concurrent run published the same version first
                shutil.rmtree(partial, ignore_errors=True)
        folders = [target, *(child for child in target.iterdir() if child.is_dir())]
        found = next((folder for folder in folders if (folder / "config.json").is_file()), None)
        if found is None:
            raise ConfigError(
                f"{uri} (version {version.version}) has no pretrain artifact in this store (tag "
                f"{ARTIFACT_PATH_TAG}={path!r}) and its files hold no transformers checkpoint "
                "(config.json); give pretrain.init_from as a folder"
            )
        return found
