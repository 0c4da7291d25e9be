"""Config keys that feed a library dataclass are declared fields, and they match what they feed.

`trainer.*`'s optimizer keys feed `OptimizerSettings`, `model.*` feeds `EncoderConfig`: each is
written out in its settings class (so grep and mypy see it), and this file proves the names, the
types and the accepted ranges agree, and names every default that deliberately differs.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
from pydantic import ValidationError

from flows.core.settings import ConfigError, Settings
from flows.training.settings import OPTIMIZER_KEYS, ModelSettings, TrainerSettings
from lightning_modules.models.config import EncoderConfig
from lightning_modules.optim_settings import OptimizerSettings

# What the tokenizer supplies: arguments of `ModelSettings.encoder`, never `model.*` keys.
FROM_THE_TOKENIZER = {"vocab_size", "pad_token_id"}


def plain(annotation: Any) -> Any:
    """The type under any `Annotated[...]` constraints: what a value must be."""
    if typing.get_origin(annotation) is typing.Annotated:
        return typing.get_args(annotation)[0]
    return annotation


def probes(annotation: Any) -> list[Any]:
    """Values around every range a field of this type might have (and outside any choice)."""
    kind = plain(annotation)
    if typing.get_origin(kind) is typing.Literal:
        return [*typing.get_args(kind), "none of these"]
    if kind is bool:
        return [True, False]
    numbers = [-1, 0, 1, 2, 7, 128]
    if kind is int or kind == int | None:
        return numbers
    if kind is float:
        return [*numbers, -0.5, 0.0, 1e-9, 0.5, 0.98, 0.999, 1.0, 2.5]
    return ["absolute", "rotary", "post", "pre", "gelu", "geglu", "gelu_tanh", "nope"]


def accepts(build: Any, **values: Any) -> bool:
    try:
        build(**values)
    except (ConfigError, ValidationError, ValueError):
        return False
    return True


CASES = [
    # settings class, the dataclass it feeds, the fields of the dataclass it holds, a builder
    # of the dataclass that fills what the settings do not hold
    (TrainerSettings, OptimizerSettings, set(OPTIMIZER_KEYS), OptimizerSettings),
    (
        ModelSettings,
        EncoderConfig,
        {field.name for field in dataclasses.fields(EncoderConfig)} - FROM_THE_TOKENIZER,
        lambda **values: EncoderConfig(vocab_size=8, **values),
    ),
]


@pytest.mark.parametrize(("settings", "library", "names", "build"), CASES)
def test_each_key_is_a_declared_field_of_the_type_the_library_reads(
    settings: type[Settings], library: type, names: set[str], build: Any
) -> None:
    hints = typing.get_type_hints(library, include_extras=True)
    fields = settings.model_fields
    assert names <= set(fields), f"undeclared: {sorted(names - set(fields))}"
    for name in names:
        assert fields[name].annotation == plain(hints[name]), name


@pytest.mark.parametrize(("settings", "library", "names", "build"), CASES)
def test_each_key_accepts_exactly_the_values_the_library_accepts(
    settings: type[Settings], library: type, names: set[str], build: Any
) -> None:
    hints = typing.get_type_hints(library, include_extras=True)
    # Room for any warmup: `trainer.warmup_steps` must stay below `trainer.max_steps`.
    context = {"max_steps": 1000} if settings is TrainerSettings else {}
    for name in sorted(names):
        for value in probes(hints[name]):
            assert accepts(settings, **context, **{name: value}) == accepts(
                build, **{name: value}
            ), f"{settings.__name__}.{name}={value!r}"


def test_no_other_settings_field_shares_a_name_with_what_it_feeds() -> None:
    """A trainer key named like an optimizer field but left out of OPTIMIZER_KEYS would be read
    by nothing that builds the optimizer."""
    optimizer = {field.name for field in dataclasses.fields(OptimizerSettings)}
    assert optimizer & set(TrainerSettings.model_fields) == set(OPTIMIZER_KEYS)
    model = {field.name for field in dataclasses.fields(EncoderConfig)} - FROM_THE_TOKENIZER
    assert set(ModelSettings.model_fields) == {*model, "name"}


# Where a run's default is not the library's, and why (a library default is what code that
# builds the dataclass directly gets: fine-tuning, the importer, tests).
DELIBERATE = {
    # The small-budget pretraining recipe (Cramming): a short run underfits, so no dropout, and
    # a higher peak rate after a 10% warmup. BERT's values stay the library's (experiment=bert).
    (ModelSettings, "dropout"),
    (ModelSettings, "attention_dropout"),
    (TrainerSettings, "learning_rate"),
    (TrainerSettings, "warmup_steps"),
}


@pytest.mark.parametrize(("settings", "library", "names", "build"), CASES)
def test_defaults_are_the_librarys_but_where_the_recipe_chose_otherwise(
    settings: type[Settings], library: type, names: set[str], build: Any
) -> None:
    defaults = {field.name: field.default for field in dataclasses.fields(library)}
    differ = {
        (settings, name) for name in names if settings.model_fields[name].default != defaults[name]
    }
    assert differ == {(cls, name) for cls, name in DELIBERATE if cls is settings}
