"""When a failed stage task is retried: I/O that fails transiently, never a deterministic error.

Reading and tokenizing text can fail transiently (network filesystems, the hub); retrying is safe
because a stage publishes atomically. Training is never retried: a rerun resumes instead. The
pipeline's I/O tasks (tokenizer, shards, checkpoint) and `cloze evaluate`'s tokenizer take
`IO_TASK_OPTIONS`.
"""

from __future__ import annotations

from typing import Any

from prefect.states import State

from flows.core.artifacts import ArtifactError
from flows.core.settings import ConfigError
from flows.corpora.formats import CorpusInputError
from lightning_modules.data.shard_format import CorruptShardError

# Errors that the same inputs raise every time: retrying them only delays the `error:` line.
DETERMINISTIC_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    CorpusInputError,  # and TaskInputError
    ArtifactError,
    CorruptShardError,
    UnicodeError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


def can_heal(error: BaseException) -> bool:
    """Whether a retry could succeed: I/O that fails transiently, never a deterministic error.

    The whole cause chain counts, so an input error wrapped by a worker pool is still one.
    """
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    if any(isinstance(link, DETERMINISTIC_ERRORS) for link in chain):
        return False
    return any(isinstance(link, (OSError, TimeoutError)) for link in chain)


def retry_if_it_can_heal(task: Any, task_run: Any, state: State) -> bool:
    """Prefect's `retry_condition_fn`: a failed state holds the exception as its data."""
    error = state.data if isinstance(state.data, BaseException) else None
    return error is not None and can_heal(error)


# The Prefect task options of a stage that reads or tokenizes text (see the module docstring).
IO_TASK_OPTIONS: dict[str, Any] = {
    "retries": 2,
    "retry_delay_seconds": 30,
    "retry_condition_fn": retry_if_it_can_heal,
    "tags": ["cloze-io"],
}
