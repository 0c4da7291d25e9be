"""One validation library for every config group: pydantic v2, with the project's error texts.

Each group of `conf/` is one `Settings` subclass. Types are strict (a string is never read as a
number, a bool never as an integer), unknown keys are refused, `nan` and `inf` are refused, and
every numeric key carries its range (`bounds`). `settings_from` is the one place a pydantic error
becomes a `ConfigError` whose message names the full dotted key, the value and what would fit.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import annotated_types
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    create_model,
)
from pydantic_core import ErrorDetails, PydanticCustomError

SettingsT = TypeVar("SettingsT", bound=BaseModel)


class ConfigError(ValueError):
    """A config key is unknown, missing or has an unusable value; the message names the key."""


class Settings(BaseModel):
    """A config group: immutable, strictly typed, closed to unknown keys, finite numbers only."""

    # A docstring under a field is its description: the one line conf/ and the docs show.
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
    )
    # The config key of the group, for errors when a class is built in code rather than read.
    section: ClassVar[str] = ""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise config_error(error.errors()[0], type(self), self.section) from None

    # Validation (`model_validate`, nested groups) must not go through the __init__ above, or a
    # nested group's error would be worded without its parent's key: mark it as pydantic's own.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]


def _number(value: Any) -> float:
    """An int or a float, kept as given: `5` and `5.0` are different values in an artifact key."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PydanticCustomError("number_type", "must be a number")
    if not math.isfinite(value):
        raise PydanticCustomError("finite_number", "must be a finite number")
    return value


Number = Annotated[float, PlainValidator(_number)]


def bounds(
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
) -> AfterValidator:
    """A range check whose message states the whole range, not only the side that failed."""
    low, high = (gt if gt is not None else ge), (lt if lt is not None else le)
    if low is not None and high is not None:
        brackets = ("(" if gt is not None else "[") + (")" if lt is not None else "]")
        text = (
            f"must be between {low} and {high}"
            if brackets == "[]"
            else f"must be in {brackets[0]}{low}, {high}{brackets[1]}"
        )
    elif low is not None:
        text = f"must be at least {ge}" if ge is not None else f"must be greater than {gt}"
    else:
        text = f"must be at most {le}" if le is not None else f"must be less than {lt}"

    def check(value: Any) -> Any:
        inside = (
            (gt is None or value > gt)
            and (ge is None or value >= ge)
            and (lt is None or value < lt)
            and (le is None or value <= le)
        )
        if not inside:
            raise PydanticCustomError("out_of_range", text)
        return value

    return AfterValidator(check)


def one_of(allowed: tuple[Any, ...]) -> PlainValidator:
    """A choice among `allowed`; any other value, of any type, is named with the choices."""

    def check(value: Any) -> Any:
        if isinstance(value, bool) or value not in allowed:
            raise PydanticCustomError("one_of", f"must be one of {allowed}")
        return value

    return PlainValidator(check)


def settings_from(cls: type[SettingsT], section: Mapping[str, Any], prefix: str) -> SettingsT:
    """`section` validated as `cls`; any problem is a ConfigError naming `prefix.<key>`."""
    if not isinstance(section, Mapping):
        raise ConfigError(f"{prefix or 'the config'} must be a mapping of settings")
    try:
        return cls.model_validate(dict(section))
    except ValidationError as error:
        raise config_error(error.errors()[0], cls, prefix) from None


TYPE_NAMES = {
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}


def config_error(detail: ErrorDetails, cls: type[BaseModel], prefix: str) -> ConfigError:
    """The project's wording for one pydantic error (the first one a user should fix)."""
    loc = [str(part) for part in detail["loc"]]
    key = ".".join([prefix, *loc] if prefix else loc)
    kind, value = detail["type"], detail.get("input")
    if kind == "extra_forbidden":
        parent = ".".join([prefix, *loc[:-1]] if prefix else loc[:-1])
        model = model_at(cls, loc[:-1])
        return ConfigError(unknown_key(key, model.model_fields if model else ["?"], parent))
    if kind == "missing":
        return ConfigError(f"missing config key {key}")
    if kind == "value_error":
        return ConfigError(str(detail.get("ctx", {}).get("error", detail["msg"])))
    if kind in TYPE_NAMES:
        nullable = " or null" if field_allows_none(cls, loc) else ""
        return ConfigError(f"{key}={value!r} must be {TYPE_NAMES[kind]}{nullable}")
    return ConfigError(f"{key}={value!r} {detail['msg']}")


def unknown_key(key: str, valid: Iterable[str], parent: str) -> str:
    """`unknown config key trainer.max_stepz; nearest valid keys: trainer.max_steps`: the keys
    spelled most like it, else every key of its level. A typo is never fixed by adding the key
    (Hydra's `+key` advice), so none is given."""
    names = sorted(valid)
    leaf = key.rsplit(".", 1)[-1]
    nearest = difflib.get_close_matches(leaf, names, n=3, cutoff=0.6)
    if nearest:
        dotted = [f"{parent}.{name}" if parent else name for name in nearest]
        return f"unknown config key {key}; nearest valid keys: {', '.join(dotted)}"
    where = f"under {parent}" if parent else "at the top level"
    return f"unknown config key {key}; valid keys {where}: {', '.join(names)}"


def model_at(cls: type[BaseModel], loc: list[str]) -> type[BaseModel] | None:
    """The settings class at `loc` inside `cls` (a `dict[str, X]` field consumes one key)."""
    current: Any = cls
    parts = list(loc)
    while parts:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(parts.pop(0))
        if field is None:
            return None
        current = field.annotation
        if typing.get_origin(current) in (typing.Union, types.UnionType):  # `X | None`
            models = [arg for arg in typing.get_args(current) if arg is not type(None)]
            current = models[0] if len(models) == 1 else current
        if typing.get_origin(current) is dict and parts:
            current = typing.get_args(current)[1]
            parts.pop(0)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def field_allows_none(cls: type[BaseModel], loc: list[str]) -> bool:
    model = model_at(cls, loc[:-1]) if loc else None
    field = model.model_fields.get(loc[-1]) if model else None
    if field is None:
        return False
    annotation = field.annotation
    is_union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return is_union and type(None) in typing.get_args(annotation)


def output_settings(settings: BaseModel, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields that change a stage's output, for its content key."""
    return settings.model_dump(exclude=set(exclude))


def settings_of(
    library: type,
    names: Iterable[str] | None = None,
    prefix: str = "",
    base: type[Settings] = Settings,
) -> type[Settings]:
    """A `Settings` class whose fields are those of `library`'s typed config (a dataclass of
    `lightning_modules/`): its types, defaults and descriptions, the one home of each, read
    with this module's number type and range wording. `names` picks some (all: None); `prefix`
    names them as the config keys do (`span_` + SpanLengths' `p`); `base` holds fields of
    another config the group reads too. A group's settings class derives from it and adds what
    is the run's alone."""
    hints = typing.get_type_hints(library, include_extras=True)
    described = getattr(library, "__pydantic_fields__", {})
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(library):
        if names is not None and field.name not in names:
            continue
        info = described.get(field.name)
        description = info.description if info is not None else field.metadata.get("doc")
        default = field.default if info is None else info.default
        default = ... if default is dataclasses.MISSING else default  # required, as there
        fields[prefix + field.name] = (
            settings_type(hints[field.name]),
            Field(default, description=description),
        )
    return create_model(f"{library.__name__}Keys", __base__=base, **fields)


LibraryT = TypeVar("LibraryT")


def library_config(settings: BaseModel, library: type[LibraryT], prefix: str = "") -> LibraryT:
    """The library's config of `settings_of(library, prefix=prefix)`'s fields, as set."""
    names = [field.name for field in dataclasses.fields(library)]  # type: ignore[arg-type]
    return library(**{name: getattr(settings, prefix + name) for name in names})


BOUNDS = {
    annotated_types.Gt: "gt",
    annotated_types.Ge: "ge",
    annotated_types.Lt: "lt",
    annotated_types.Le: "le",
}


def settings_type(annotation: Any) -> Any:
    """A library field's type as a setting: a float is a `Number` (an int kept as given, as an
    artifact key holds it), a range is `bounds`, a Literal is `one_of` its choices."""
    if typing.get_origin(annotation) is Annotated:
        kind, *metadata = typing.get_args(annotation)
        limits = {
            BOUNDS[type(item)]: getattr(item, BOUNDS[type(item)])
            for item in metadata
            if type(item) in BOUNDS
        }
        plain = settings_type(kind)
        return Annotated[plain, bounds(**limits)] if limits else plain
    if annotation is float:
        return Number
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = tuple(settings_type(arg) for arg in typing.get_args(annotation))
        return typing.Union[options]  # noqa: UP007 - built from a tuple
    if typing.get_origin(annotation) is Literal:
        return Annotated[annotation, one_of(typing.get_args(annotation))]
    return annotation
