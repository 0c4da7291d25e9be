"""The run form of the pipeline deployment: typed, described parameters that become overrides.

The Prefect UI renders a deployment's parameters from its flow's signature: choices from
`conf/` become drop-downs, the common knobs typed fields, and every field shows its description.
Each parameter is still a plain top-level value, so `prefect deployment run --param until=pretrain
--param max_steps=200` works as before. Whatever the form does not cover goes in `overrides`, raw
Hydra syntax, applied last.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from flows.core.config import CONF_DIR

P = ParamSpec("P")
R = TypeVar("R")
STAGE_NAMES = ("tokenizer", "shards", "pretrain", "distill", "finetune")  # flows.pipeline.STAGES


def presets(group: str, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """`conf/<group>/*.yaml` as enum members: the choices a run can pick."""
    names = sorted(path.stem for path in (CONF_DIR / group).glob("*.yaml"))
    return {name: name for name in names if name not in exclude}


if TYPE_CHECKING:  # the values are read from conf/ at import; to a type checker they are str
    Experiment: TypeAlias = str
    Model: TypeAlias = str
    Task: TypeAlias = str
    Stage: TypeAlias = str
else:
    Experiment = StrEnum("Experiment", presets("experiment"))
    Model = StrEnum("Model", presets("model", exclude=("base",)))
    Task = StrEnum("Task", presets("finetune", exclude=("base",)))
    Stage = StrEnum("Stage", {name: name for name in STAGE_NAMES})


class RunForm(BaseModel):
    """The pipeline deployment's parameters; `to_overrides` is what the CLI would be given."""

    model_config = ConfigDict(extra="forbid", use_enum_values=True)

    experiment: Experiment | None = Field(
        default=None,
        description="An experiment bundle from conf/experiment/ (e.g. smoke: a whole run in "
        "about a minute). Empty: the defaults of conf/config.yaml.",
    )
    until: Stage = Field(
        default="finetune",
        description="The last stage to run; the stages before it are computed, or reused from "
        "the artifact store when their inputs have not changed.",
    )
    model: Model | None = Field(
        default=None, description="A model preset from conf/model/ (model=<name>)."
    )
    corpus_paths: list[str] | None = Field(
        default=None,
        description="Text files, folders or globs to pretrain on (corpus=files with these "
        "corpus.paths). Empty: the configured corpus.",
    )
    max_steps: Steps | None = Field(
        default=None, description="Pretraining steps (trainer.max_steps)."
    )
    tasks: list[Task] | None = Field(
        default=None,
        description="Downstream tasks to fine-tune on, pretrained against random init "
        "(finetune.tasks). Empty: the configured tasks.",
    )
    overrides: list[str] | None = Field(
        default=None,
        description="Any other Hydra overrides, as on the command line, applied last, e.g. "
        "trainer.batch_size=64 or tokenizer=bpe.",
    )

    def to_overrides(self) -> list[str]:
        """The CLI's argument list: `python -m flows <these>` composes the same config."""
        items = [f"experiment={self.experiment}"] if self.experiment else []
        if self.model:
            items.append(f"model={self.model}")
        if self.corpus_paths:
            items += ["corpus=files", f"corpus.paths={json.dumps(self.corpus_paths)}"]
        if self.max_steps is not None:
            items.append(f"trainer.max_steps={self.max_steps}")
        if self.tasks:
            items.append(f"finetune.tasks=[{','.join(str(task) for task in self.tasks)}]")
        return [*items, *(self.overrides or [])]


Steps = Annotated[int, Field(ge=1)]  # the flow's signature carries the bound for the form


def described_by_form(function: Callable[P, R]) -> Callable[P, R]:
    """Appends an `Args:` section with the form's descriptions to `function`'s docstring.

    Prefect shows a parameter's description from the flow's docstring; a `Field` default would
    carry it too, but Prefect then passes the `FieldInfo` itself for a parameter a run omits.
    """
    names = inspect.signature(function).parameters
    lines = [
        f"    {name}: {field.description}"
        for name, field in RunForm.model_fields.items()
        if name in names
    ]
    function.__doc__ = "\n".join([inspect.getdoc(function) or "", "", "Args:", *lines])
    return function
