"""`finetune.*`: which tasks to evaluate, and the recipe both arms of each task use.

The recipe fields of `finetune.*` (`Recipe` below, listed in conf/finetune/base.yaml) are the full
evaluation recipe. A task's catalog entry may set some of them under `recipe:` for that task
alone: the demo task does (a cheap grid and 64 tokens, fit for the demo's minutes), so a task a
user adds runs on the full recipe, not on the demo's. A field a task's entry sets wins over
`finetune.<field>`.

A task's own recipe is the full recipe with its entry's fields (as conf/finetune/catalog.yaml
defines them, for a task defined there). An experiment or override that changes
`finetune.*` changes the recipe of every task it does not set: a run says so before any stage
(`recipe_notes`), and an entry's `recipe: own` keeps the task on its own recipe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import yaml
from pydantic import AfterValidator, Field, PrivateAttr, model_validator
from pydantic_core import PydanticCustomError

from flows.core.config import CONF_DIR
from flows.core.keys import opt_ins_at_default
from flows.core.settings import (
    ConfigError,
    Number,
    bounds,
    one_of,
    settings_from,
    settings_of,
)
from flows.downstream.curves import LabelCount, checkpoint_fractions, label_counts
from flows.downstream.kinds.registry import kind_of
from flows.downstream.tasks.load import Sampling, check_tasks, example_texts, load_task
from flows.downstream.tasks.prompting import PromptSettings
from flows.downstream.tasks.spec import (
    BASELINES,
    TaskSpec,
    default_data_dir,
    recipe_key,
    task_specs,
)
from lightning_modules.models.config import POOLINGS, RELATION_HEADS
from lightning_modules.optim_settings import OptimizerSettings

PositiveRate = Annotated[Number, bounds(gt=0)]


def _not_empty(grid: list[float]) -> list[float]:
    if not grid:
        raise PydanticCustomError(
            "empty_grid",
            "must be a non-empty list of positive numbers (the grid each arm picks from on "
            "validation)",
        )
    return grid


Grid = Annotated[list[PositiveRate], AfterValidator(_not_empty)]


# Fine-tuning's AdamW keys beside the rates and decay: `OptimizerSettings`' fields (their home).
FINETUNE_OPTIMIZER_KEYS = ("beta2", "eps")


class Recipe(settings_of(OptimizerSettings, FINETUNE_OPTIMIZER_KEYS)):  # type: ignore[misc]
    """How one task is evaluated. `learning_rates` is a grid searched per arm on the validation
    split; the epoch is chosen per run on validation too (best epoch kept, `patience` epochs to
    stop). `train_examples`/`validation_examples`/`test_examples` cap the splits (None: all)."""

    section = "finetune"
    seeds: Annotated[int, bounds(ge=1)] = 5
    """Seeds per arm: mean, std and a paired-t interval on the lift."""
    learning_rates: Grid = Field(default_factory=lambda: [1e-4, 3e-4, 1e-3])
    """The grid; each arm picks its own rate on validation."""
    pretrained_learning_rates: Grid = Field(default_factory=lambda: [2e-5, 5e-5, 1e-4])
    """The grid of arms that start from a public checkpoint: base, and pretrained continuing it."""
    pretrained_epochs: Annotated[int, bounds(ge=1)] = 10
    """Epochs at most for those arms (a pretrained encoder needs fewer)."""
    grid_seeds: Annotated[int, bounds(ge=1)] = 1
    """Seeds each grid rate is scored on (mean validation score); 1: the first seed only."""
    grid_extensions: Annotated[int, bounds(ge=0)] = 0
    """Rates tried past an end of the grid that validation chose, a grid step each; 0: off."""
    grid_pruning_margin: Annotated[Number, bounds(gt=0, lt=1)] | None = None
    """Drop a grid rate trailing the leading rate's validation by more than this; null: off."""
    max_length: Annotated[int, bounds(ge=8)] = 128
    """Tokens per example at most."""
    epochs: Annotated[int, bounds(ge=1)] = 20
    """Epochs at most (generous): early stopping on validation ends a run."""
    patience: Annotated[int, bounds(ge=1)] = 3
    """Epochs without a better validation score before a run stops."""
    batch_size: Annotated[int, bounds(ge=1)] = 32
    """Examples per step."""
    group_by_length: bool = True
    """Training batches of examples of like length (less padding); false: random batches."""
    weight_decay: Annotated[Number, bounds(ge=0)] = 0.01
    """AdamW's decoupled weight decay."""
    warmup_ratio: Annotated[Number, bounds(ge=0, lt=1)] = 0.1
    """Share of a run's steps spent warming the learning rate up."""
    classifier_dropout: Annotated[Number, bounds(ge=0, lt=1)] = 0.1
    """Dropout before the task head."""
    encoder_dropout: Annotated[Number, bounds(ge=0, lt=1)] | None = None
    """Dropout in the encoder while fine-tuning (hidden, attention); null: the model's own."""
    pooling: Annotated[Literal["cls", "mean"], one_of(POOLINGS)] = "cls"
    """What a classification head reads: cls ([CLS], BERT) | mean (of the tokens)."""
    relation_head: Annotated[Literal["entity_start", "cls"], one_of(RELATION_HEADS)] = (
        "entity_start"
    )
    """What a relation head reads: the entities' start markers, concatenated | [CLS]."""
    doc_stride: Annotated[int, bounds(ge=1)] | None = None
    """Question answering: context tokens two windows share; null: a quarter of max_length."""
    prompt: PromptSettings | None = None
    """Prompt-based fine-tuning (PET): the MLM head fills a template's {mask}; null: off."""
    train_examples: Annotated[int, bounds(ge=1)] | None = None
    """Limited-label mode: a sample of train this large, drawn per seed; null: all of it."""
    validation_examples: Annotated[int, bounds(ge=1)] | None = 1000
    """At most; carved from train when a task has no validation file."""
    test_examples: Annotated[int, bounds(ge=1)] | None = None
    """At most; null: the whole test split."""

    @property
    def stride(self) -> int:
        """`doc_stride`, or a quarter of `max_length` (run_qa.py's 128 of 384 is a third)."""
        return self.doc_stride if self.doc_stride is not None else self.max_length // 4

    def sampling(self, seed: int) -> Sampling:
        return Sampling(self.validation_examples, self.test_examples, seed)

    def key_record(self, unused: set[str]) -> dict[str, Any]:
        """The recipe as a finetune key holds it, less the fields the task's head ignores; an
        opt-in field left at its default stays out, so adding one moves no existing key."""
        off = opt_ins_at_default(self, OPT_IN_RECIPE_FIELDS)
        return self.model_dump(exclude=unused | off | set(CHECKPOINT_GRID_FIELDS))

    def checkpoint_grid(self) -> dict[str, Any]:
        """The grid of the arms that start from a checkpoint, as a key holds it."""
        return self.model_dump(include=set(CHECKPOINT_GRID_FIELDS))

    def checkpoint_grid_text(self) -> str:
        """`pretrained and base: learning rates 2e-05/5e-05/0.0001, at most 10 epochs`."""
        rates = "/".join(f"{rate:g}" for rate in self.pretrained_learning_rates)
        return (
            f"pretrained and base: learning rates {rates}, at most "
            f"{plural(self.pretrained_epochs, 'epoch')}; random init: learning rates "
            f"{'/'.join(f'{rate:g}' for rate in self.learning_rates)}, at most "
            f"{plural(self.epochs, 'epoch')}"
        )


# Recipe fields the key holds only when set off their default (Recipe.key_record); the grid of
# arms that start from a checkpoint enters a run's key whenever it has such arms (finetune.py).
OPT_IN_RECIPE_FIELDS = (
    "grid_seeds",
    "grid_extensions",
    "grid_pruning_margin",
    "encoder_dropout",
    "prompt",
    "doc_stride",
    "beta2",
    "eps",
)
CHECKPOINT_GRID_FIELDS = ("pretrained_learning_rates", "pretrained_epochs")


RECIPE_FIELDS = tuple(Recipe.model_fields)


@dataclass(frozen=True)
class TaskPlan:
    """One task's fine-tuning, resolved once when `finetune.*` is validated: its spec and the
    recipe it runs on. Stages read it; nothing downstream resolves a recipe again."""

    spec: TaskSpec
    recipe: Recipe

    def seeds(self, seed: int) -> list[int]:
        """The run's seed and the `recipe.seeds - 1` after it, the same in each arm."""
        return [seed + offset for offset in range(self.recipe.seeds)]

    def text(self) -> str:
        """One line: the recipe, and which fields the task's catalog entry set."""
        return recipe_text(self.recipe, sorted(self.spec.recipe))


OWN = "own"  # a catalog entry's `recipe: own`: the task's own recipe, whatever finetune.* says


@cache
def defined_tasks() -> dict[str, Any]:
    """The catalog conf/finetune/catalog.yaml defines, read as written: a file read, not a
    composition (no Hydra inside a validator). Its full recipe is `Recipe`'s defaults, which
    conf/finetune/base.yaml is generated from and catalog.yaml extends unchanged."""
    text = (CONF_DIR / "finetune" / "catalog.yaml").read_text()
    return dict((yaml.safe_load(text) or {}).get("catalog") or {})


def own_recipe(task: str, entry: dict[str, Any]) -> dict[str, Any]:
    """The recipe `task` runs on by its own: the full recipe with its entry's fields, as
    conf/finetune/catalog.yaml defines them for a task defined there, else as `entry` says."""
    defined = defined_tasks().get(task)
    fields = (defined.get("recipe") or {}) if isinstance(defined, dict) else entry
    return {**Recipe().model_dump(), **fields}


class FinetuneSettings(Recipe):
    """The task list, the catalog, the full recipe (inherited) and what is shared by all tasks:
    the interval's confidence, baselines, the lift curve's checkpoints."""

    tasks: list[str] = Field(default_factory=lambda: ["pydoc_topics"])
    """The catalog's tasks to evaluate."""
    catalog: dict[str, Any] = Field(default_factory=dict)
    """Tasks by name (conf/finetune/catalog.yaml); an entry's `recipe:` fields are its own."""
    data_dir: str | None = None
    """Where relative task paths resolve; null: $CLOZE_DATA_DIR, else ../shared/data."""
    confidence: Annotated[Number, bounds(ge=0.5, lt=1)] = 0.95
    """The intervals' confidence."""
    baselines: list[str] | None = None
    """null: every baseline of each task's kind; []: none."""
    checkpoints: list[Number] = Field(default_factory=lambda: [1.0])
    """The lift-vs-compute curve: fractions of pretraining whose weights are evaluated too."""
    label_counts: list[LabelCount] | None = None
    """The label-efficiency curve: labels per seed to evaluate again at; null: off."""
    bootstrap_samples: Annotated[int, bounds(ge=100)] = 1000
    """Test-set resamples behind the lift's bootstrap interval."""
    log_every_steps: Annotated[int, bounds(ge=1)] = 50
    """Steps between logged fine-tuning metrics."""

    # Each task of `tasks` with its recipe, built by the validator below (`plan`).
    _plan: tuple[TaskPlan, ...] = PrivateAttr(default=())

    @model_validator(mode="before")
    @classmethod
    def _own_recipes(cls, data: Any) -> Any:
        """`recipe: own` becomes the fields of the task's own recipe that this config's
        `finetune.*` would change (the others need no entry)."""
        if not isinstance(data, dict) or not isinstance(data.get("catalog"), dict):
            return data
        catalog = dict(data["catalog"])
        for name, entry in catalog.items():
            if isinstance(entry, dict) and entry.get("recipe") == OWN:
                shared = {
                    field: data.get(field, Recipe.model_fields[field].default)
                    for field in RECIPE_FIELDS
                }
                own = own_recipe(name, {})
                fields = {key: value for key, value in own.items() if value != shared[key]}
                catalog[name] = {**entry, "recipe": fields}
        return {**data, "catalog": catalog}

    @model_validator(mode="after")
    def _tasks_are_known(self) -> FinetuneSettings:
        if not self.tasks:
            raise ConfigError("finetune.tasks is empty; name at least one task (e.g. [sst2])")
        if len(set(self.tasks)) != len(self.tasks):
            raise ConfigError(f"finetune.tasks={self.tasks} names a task twice")
        checkpoint_fractions(self.checkpoints)
        if self.label_counts is not None:
            if not self.label_counts:
                raise ConfigError("finetune.label_counts is empty; null turns the curve off")
            label_counts(self.label_counts)
        self._plan = self.plan_of(self.specs())  # an unknown task or a bad entry fails now
        for task in self._plan:
            spec, recipe = task.spec, task.recipe
            self.baselines_for(spec)
            if recipe.prompt is not None and not kind_of(spec.kind).prompts:
                key = recipe_key(spec.name, "prompt", spec.recipe)
                raise ConfigError(
                    f"{key} is set, but task {spec.name} is {spec.kind}: a prompt gives a "
                    "sentence one label; set it only for classification tasks"
                )
            if recipe.doc_stride is not None and recipe.doc_stride >= recipe.max_length // 2 - 2:
                key = recipe_key(spec.name, "doc_stride", spec.recipe)
                raise ConfigError(
                    f"{key}={recipe.doc_stride} must be below max_length // 2 - 2 "
                    f"({recipe.max_length // 2 - 2}): a window holds the question (up to half "
                    "of max_length) and must move on by at least one context token"
                )
            if recipe.grid_seeds > recipe.seeds:
                key = recipe_key(spec.name, "grid_seeds", spec.recipe)
                raise ConfigError(
                    f"{key}={recipe.grid_seeds} scores the learning-rate grid on more seeds than "
                    f"task {spec.name} runs ({recipe.seeds}); set it to at most {recipe.seeds}"
                )
        return self

    @property
    def plan(self) -> tuple[TaskPlan, ...]:
        """Each task of `finetune.tasks`, in order, with the recipe it runs on."""
        return self._plan

    def task(self, spec: TaskSpec) -> TaskPlan:
        """The plan of one task of `finetune.tasks`."""
        return next(task for task in self._plan if task.spec.name == spec.name)

    def plan_of(self, specs: Iterable[TaskSpec]) -> tuple[TaskPlan, ...]:
        """The one place a task's recipe is resolved: the full recipe with the fields the task's
        entry sets under `recipe:` replaced (for `tasks` when validated; for the tasks whose
        validation examples a corpus leaves out, when it reads them)."""
        shared = self.model_dump(include=set(RECIPE_FIELDS))
        plans = []
        for spec in specs:
            key = f"finetune.catalog.{spec.name}.recipe"
            own = settings_from(Recipe, spec.recipe, key).model_dump(exclude_unset=True)
            plans.append(TaskPlan(spec, Recipe(**{**shared, **own})))
        return tuple(plans)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with `update` validated, so the plan follows the tasks and recipe it changes."""
        if not update:
            return super().model_copy(deep=deep)
        return type(self).model_validate({**self.model_dump(), **update})

    def baselines_for(self, spec: TaskSpec) -> tuple[str, ...]:
        """The baselines a task gets; one its kind cannot have is a config error."""
        possible = BASELINES[spec.kind]
        if self.baselines is None:
            return possible
        for name in self.baselines:
            if name not in possible:
                raise ConfigError(
                    f"finetune.baselines: {name!r} cannot be computed for task {spec.name}, a "
                    f"{spec.kind} task; a {spec.kind} task has {', '.join(possible)}"
                )
        return tuple(self.baselines)

    def specs(self) -> list[TaskSpec]:
        return task_specs(self.catalog, self.tasks)

    @property
    def curve_fractions(self) -> tuple[float, ...]:
        """The curve's points below the final weights; empty: no curve asked for."""
        return tuple(value for value in checkpoint_fractions(self.checkpoints) if value < 1.0)

    @property
    def curve_counts(self) -> list[int | None]:
        """The label curve's counts (None: the whole pool); empty: no curve asked for."""
        return label_counts(self.label_counts) if self.label_counts else []

    def check_task_files(self, seed: int) -> None:
        """Reads every task's files now (flows/downstream/tasks/load.py `check_tasks`), and checks
        that each task's train pool holds the label curve's counts."""
        recipes = [(task.spec, task.recipe) for task in self.plan]
        pools = check_tasks(
            [(spec, recipe, recipe.sampling(seed)) for spec, recipe in recipes],
            self.resolved_data_dir(),
        )
        counts = [count for count in self.curve_counts if count is not None]
        for spec, recipe in recipes if counts else []:
            pool = pools.get(spec.name)
            if pool is None and spec.task_format.source == "built_in":
                sampling = recipe.sampling(seed)
                pool = load_task(spec, self.resolved_data_dir(), sampling).pools["train"]
            if pool is not None and max(counts) > pool:
                raise ConfigError(
                    f"finetune.label_counts={self.label_counts}: {max(counts)} labels is more "
                    f"than task {spec.name}'s train pool holds ({pool} examples, validation "
                    f"carved out); use counts up to {pool}, or all"
                )

    def validation_texts(self, names: list[str], seed: int) -> list[str]:
        """The validation examples' texts of the named catalog tasks, carved and sampled as the
        finetune stage will at this seed: what `corpus.exclude_validation_of` keeps out."""
        texts = []
        for task in self.plan_of(task_specs(self.catalog, names)):
            spec, sampling = task.spec, task.recipe.sampling(seed)
            validation = load_task(spec, self.resolved_data_dir(), sampling).splits["validation"]
            texts += [text for example in validation for text in example_texts(example)]
        return texts

    def recipe_notes(self) -> list[str]:
        """A line per task whose recipe here is not its own (an experiment's `finetune.*`
        applies to every task that does not set the field), naming what differs."""
        notes = []
        for spec, used in ((task.spec, task.recipe) for task in self.plan):
            own = Recipe(**own_recipe(spec.name, spec.recipe))
            differ = [
                f"{field} {getattr(used, field)} (own {getattr(own, field)})"
                for field in RECIPE_FIELDS
                if getattr(used, field) != getattr(own, field)
            ]
            if differ:
                notes.append(
                    f"task {spec.name} runs on this config's recipe, not its own: "
                    f"{', '.join(differ)}; finetune.catalog.{spec.name}.recipe=own keeps its own"
                )
        return notes

    def resolved_data_dir(self) -> Path:
        return Path(self.data_dir).expanduser() if self.data_dir else default_data_dir()


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def recipe_text(recipe: Recipe, from_task: list[str]) -> str:
    """`5 seeds, learning rates 0.0003/0.001/0.003, at most 15 epochs (patience 2), ...`."""
    caps = ", ".join(
        f"{name} {value}"
        for name, value in (
            ("train_examples", recipe.train_examples),
            ("validation_examples", recipe.validation_examples),
            ("test_examples", recipe.test_examples),
        )
        if value is not None
    )
    scored = f" (chosen on {plural(recipe.grid_seeds, 'seed')})" if recipe.grid_seeds > 1 else ""
    if recipe.grid_pruning_margin is not None:
        scored += f" (a rate {recipe.grid_pruning_margin:g} behind the leader dropped)"
    if recipe.grid_extensions:
        scored += (
            f" (grown by up to {plural(recipe.grid_extensions, 'rate')} past an end validation"
            " chose)"
        )
    dropout = (
        "" if recipe.encoder_dropout is None else f", encoder dropout {recipe.encoder_dropout:g}"
    )
    prompt = "" if recipe.prompt is None else f", prompt {recipe.prompt.template!r}"
    text = (
        f"{plural(recipe.seeds, 'seed')}, learning rates "
        f"{'/'.join(f'{rate:g}' for rate in recipe.learning_rates)}{scored}, at most "
        f"{plural(recipe.epochs, 'epoch')} (patience {recipe.patience}), max_length "
        f"{recipe.max_length}, batch {recipe.batch_size}{dropout}{prompt}"
        + (f", at most {caps}" if caps else "")
    )
    origin = f"; set by the task: {', '.join(from_task)}" if from_task else ""
    return f"{text}{origin}"
