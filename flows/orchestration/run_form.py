"""The run form of the pipeline deployment: typed, described parameters that become overrides.

The Prefect UI renders a deployment's parameters from its flow's signature: choices from
`conf/` become drop-downs, the common knobs typed fields, and every field shows its description.
Each field starts on the value `conf/` gives it (an optional one on `None` showed only "Property
is type None"); a field left at that value adds no override, so an experiment bundle's own
value holds. Each parameter is still a plain top-level value, so `prefect deployment run --param
until=pretrain --param max_steps=200` works as before. Whatever the form does not cover goes in
`overrides`, raw Hydra syntax, applied last.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeAlias, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field

from flows.core.config import BASE, CONF_DIR, compose_config

P = ParamSpec("P")
R = TypeVar("R")
STAGE_NAMES = ("tokenizer", "shards", "pretrain", "distill", "finetune")  # flows.plan.STAGES
NO_EXPERIMENT = "none"


def presets(group: str, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """`conf/<group>/*.yaml` as enum members: the choices a run can pick (a group's generated
    `base.yaml`, every key at its default, is what presets extend, not one of them)."""
    names = sorted(path.stem for path in (CONF_DIR / group).glob("*.yaml"))
    return {name: name for name in names if name not in (BASE, *exclude)}


def default_choices() -> dict[str, str]:
    """The preset `conf/config.yaml` picks for each group (`model: bert-tiny`)."""
    defaults = yaml.safe_load((CONF_DIR / "config.yaml").read_text())["defaults"]
    return {
        group: str(option)
        for item in defaults
        if isinstance(item, dict)
        for group, option in item.items()
    }


CONFIGURED = compose_config([])  # what a run gets for a field left at its default
DEFAULT_MODEL = default_choices()["model"]
DEFAULT_OBJECTIVE = default_choices()["objective"]
DEFAULT_STEPS: int = CONFIGURED["trainer"]["max_steps"]
DEFAULT_TASKS: list[str] = list(CONFIGURED["finetune"]["tasks"])

if TYPE_CHECKING:  # the values are read from conf/ at import; to a type checker they are str
    Experiment: TypeAlias = str
    Model: TypeAlias = str
    Objective: TypeAlias = str
    Task: TypeAlias = str
    Stage: TypeAlias = str
else:
    Experiment = StrEnum("Experiment", {NO_EXPERIMENT: NO_EXPERIMENT, **presets("experiment")})
    Model = StrEnum("Model", presets("model"))
    Objective = StrEnum("Objective", presets("objective"))
    Task = StrEnum("Task", presets("finetune", exclude=("catalog",)))  # every task's catalog
    Stage = StrEnum("Stage", {name: name for name in STAGE_NAMES})


class RunForm(BaseModel):
    """The pipeline deployment's parameters; `to_overrides` is what the CLI would be given.

    The flow's signature gives each field its `conf/` value as default (what the UI shows);
    here None means the same, so a run from code or an older deployment may omit any field.
    """

    model_config = ConfigDict(extra="forbid", use_enum_values=True)

    experiment: Experiment | None = Field(
        default=None,
        description="An experiment bundle from conf/experiment/, applied after conf/config.yaml "
        "(e.g. smoke: a whole run in about a minute). none: no bundle. The fields below left "
        "at their defaults keep the bundle's own values.",
    )
    until: Stage = Field(
        default="finetune",
        description="The last stage to run; the stages before it are computed, or reused from "
        "the artifact store when their inputs have not changed. distill needs a distill "
        "config (distill=default in overrides, or experiment distilbert).",
    )
    model: Model | None = Field(
        default=None,
        description=f"A model preset from conf/model/ (model=NAME). Left at {DEFAULT_MODEL}: "
        "the experiment's model, if it sets one.",
    )
    objective: Objective | None = Field(
        default=None,
        description="The pretraining objective from conf/objective/ (objective=NAME): mlm, "
        f"wwm (whole words), span, electra. Left at {DEFAULT_OBJECTIVE}: the experiment's "
        "objective, if it sets one.",
    )
    corpus_paths: list[str] | None = Field(
        default=None,
        description="Text files, folders or globs to pretrain on (corpus=files with these "
        "corpus.paths). Empty: the configured corpus (the Python documentation).",
    )
    init_from: str | None = Field(
        default=None,
        description="Continue from given weights (pretrain.init_from): a transformers checkpoint "
        "folder on the worker (e.g. /models/bert-base-uncased; its shape and tokenizer are then "
        "used, and fine-tuning adds the base arm), a Hub name, a pretrain artifact directory, or "
        "models:/NAME@ALIAS. Empty: pretrain from random init.",
    )
    max_steps: Steps | None = Field(
        default=None,
        description=f"Pretraining steps (trainer.max_steps). Left at {DEFAULT_STEPS}: the "
        "experiment's step count, if it sets one (smoke: 60).",
    )
    tasks: list[Task] | None = Field(
        default=None,
        description="Downstream tasks to fine-tune on, pretrained against random init "
        f"(finetune.tasks). Left at {', '.join(DEFAULT_TASKS)}: the experiment's tasks, if it "
        "sets them.",
    )
    overrides: list[str] | None = Field(
        default=None,
        description="Any other Hydra overrides, as on the command line, applied last, e.g. "
        "trainer.batch_size=64 or tokenizer=bpe.",
    )

    def to_overrides(self) -> list[str]:
        """The CLI's argument list: `python -m flows <these>` composes the same config.

        A field at its `conf/` default adds nothing: the bundle's value, if any, holds.
        """
        items = []
        if self.experiment not in (None, NO_EXPERIMENT):
            items.append(f"experiment={self.experiment}")
        if self.model not in (None, DEFAULT_MODEL):
            items.append(f"model={self.model}")
        if self.objective not in (None, DEFAULT_OBJECTIVE):
            items.append(f"objective={self.objective}")
        if self.corpus_paths:
            items += ["corpus=files", f"corpus.paths={json.dumps(self.corpus_paths)}"]
        if self.init_from:
            items.append(f"pretrain.init_from={self.init_from}")
        if self.max_steps not in (None, DEFAULT_STEPS):
            items.append(f"trainer.max_steps={self.max_steps}")
        if self.tasks and list(self.tasks) != DEFAULT_TASKS:
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
