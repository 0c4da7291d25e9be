"""Each library config is the one home of its fields; the settings class of a config group
derives its keys from it.

`model.*` is `EncoderConfig`'s, `trainer.*`'s AdamW keys are `OptimizerSettings`', `objective.*`'s
masking, span and ELECTRA keys are `MaskingRule`'s, `SpanLengths`' and `ElectraConfig`'s, the
`distill.*` loss weights are `DistillLosses`' and fine-tuning's AdamW keys `OptimizerSettings`'
again. So code that builds a library config directly gets the defaults a pipeline run gets, and
a key accepts exactly the values its library config accepts.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
from pydantic import ValidationError

from flows.core.settings import ConfigError, Settings
from flows.downstream.settings import Recipe
from flows.stages.distill_plan import DistillSettings
from flows.stages.objectives import ObjectiveSettings
from flows.training.settings import (
    FROM_THE_TOKENIZER,
    OPTIMIZER_KEYS,
    ModelSettings,
    TrainerSettings,
)
from lightning_modules.data.masking_rules import MaskingRule, SpanLengths
from lightning_modules.distill_losses import DistillLosses
from lightning_modules.models.config import ElectraConfig, EncoderConfig
from lightning_modules.optim_settings import OptimizerSettings

STUDENT = {"student": {"hidden_size": 64}}  # distill.student has no default


def test_a_library_config_and_a_pipeline_run_get_the_same_defaults() -> None:
    assert EncoderConfig(vocab_size=8).dropout == ModelSettings().dropout == 0.0
    assert OptimizerSettings().learning_rate == TrainerSettings().learning_rate == 2e-3
    assert OptimizerSettings().warmup_steps == TrainerSettings().warmup_steps
    assert DistillLosses().kl_weight == DistillSettings(**STUDENT).kl_weight


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


# settings class, the library config it derives from, the library's fields it holds, the prefix
# of their keys, a builder of the library config, the settings' other required values
CASES = [
    (TrainerSettings, OptimizerSettings, set(OPTIMIZER_KEYS), "", OptimizerSettings, {}),
    (
        ModelSettings,
        EncoderConfig,
        {field.name for field in dataclasses.fields(EncoderConfig)} - set(FROM_THE_TOKENIZER),
        "",
        lambda **values: EncoderConfig(vocab_size=8, **values),
        {},
    ),
    (ObjectiveSettings, MaskingRule, None, "", MaskingRule, {}),
    (ObjectiveSettings, SpanLengths, None, "span_", SpanLengths, {}),
    (ObjectiveSettings, ElectraConfig, None, "", ElectraConfig, {}),
    (DistillSettings, DistillLosses, None, "", DistillLosses, STUDENT),
    (Recipe, OptimizerSettings, {"beta2", "eps"}, "", OptimizerSettings, {}),
]
IDS = [f"{case[0].__name__}-{case[1].__name__}" for case in CASES]


def library_fields(library: type, names: set[str] | None) -> list[dataclasses.Field[Any]]:
    fields = dataclasses.fields(library)
    return [field for field in fields if names is None or field.name in names]


@pytest.mark.parametrize(
    ("settings", "library", "names", "prefix", "build", "needs"), CASES, ids=IDS
)
def test_each_key_has_the_library_fields_default_and_description(
    settings: type[Settings],
    library: type,
    names: set[str] | None,
    prefix: str,
    build: Any,
    needs: dict[str, Any],
) -> None:
    described = getattr(library, "__pydantic_fields__", {})
    for field in library_fields(library, names):
        key = settings.model_fields[prefix + field.name]
        assert key.default == field.default, field.name
        description = described[field.name].description if described else field.metadata["doc"]
        assert key.description == description, field.name


@pytest.mark.parametrize(
    ("settings", "library", "names", "prefix", "build", "needs"), CASES, ids=IDS
)
def test_each_key_accepts_exactly_the_values_the_library_accepts(
    settings: type[Settings],
    library: type,
    names: set[str] | None,
    prefix: str,
    build: Any,
    needs: dict[str, Any],
) -> None:
    hints = typing.get_type_hints(library, include_extras=True)
    # Room for any warmup: `trainer.warmup_steps` must stay below `trainer.max_steps`.
    context = {"max_steps": 1000} if settings is TrainerSettings else needs
    for field in library_fields(library, names):
        for value in probes(hints[field.name]):
            assert accepts(settings, **context, **{prefix + field.name: value}) == accepts(
                build, **{field.name: value}
            ), f"{settings.__name__}.{prefix}{field.name}={value!r}"


def test_no_other_trainer_key_shares_a_name_with_an_optimizer_field() -> None:
    """A trainer key named like an optimizer field but left out of OPTIMIZER_KEYS would be read
    by nothing that builds the optimizer."""
    optimizer = {field.name for field in dataclasses.fields(OptimizerSettings)}
    assert optimizer & set(TrainerSettings.model_fields) == set(OPTIMIZER_KEYS)
