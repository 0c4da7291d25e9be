"""One home per default: the settings classes hold them, conf/ holds only what presets change.

Each group's `base.yaml` is generated from its settings class (flows/conf_defaults.py); every
preset and experiment composes into a config the settings classes accept; and no preset or
experiment sets a key to the value it would have without it.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from flows.conf_defaults import GROUPS, default_of, stale
from flows.core.config import BASE, CONF_DIR, compose_config
from flows.plan import RefreshSettings, load_run_config

ABSENT = object()  # a key the config does not hold
# What a preset needs from the user to compose into a valid run config.
REQUIRED = {
    "corpus=files": ["corpus.paths=[notes.txt]"],
    "corpus=huggingface": ["corpus.name=wikitext"],
}


def options() -> Iterator[tuple[str, str]]:
    """Every preset and experiment: (group, option), bases and conf/deploy/ aside."""
    for folder in sorted(path for path in CONF_DIR.iterdir() if path.is_dir()):
        if folder.name == "deploy":  # how runs are triggered, read as it is (not by Hydra)
            continue
        for file in sorted(folder.glob("*.yaml")):
            if file.stem != BASE:
                yield folder.name, file.stem


OPTIONS = [f"{group}={option}" for group, option in options()]


def test_each_base_file_is_generated_from_its_settings_class() -> None:
    assert stale() == [], "stale: run `python -m flows.conf_defaults` to rewrite them"


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_key_has_its_default_and_a_one_line_description_in_its_class(group: str) -> None:
    for name, field in GROUPS[group].model_fields.items():
        assert field.description, f"{group}.{name} has no description"
        assert "\n" not in field.description, f"{group}.{name}: one line"


@pytest.mark.parametrize("selection", OPTIONS)
def test_every_preset_and_experiment_composes_into_a_valid_config(selection: str) -> None:
    config = compose_config([selection, *REQUIRED.get(selection, [])])
    load_run_config(config)
    RefreshSettings(**config["refresh"])


def unresolved(conf_dir: Path, overrides: list[str]) -> dict[str, Any]:
    """`conf_dir` composed with `overrides`, interpolations as written (`${oc.env:...}`)."""
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3", job_name="t"):
        composed = compose("config", overrides=overrides)
    config = OmegaConf.to_container(composed, resolve=False)
    assert isinstance(config, dict)
    return config  # type: ignore[return-value]


def leaves(node: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Each key a YAML body sets, as a path; a mapping is a step, anything else a value."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, (*prefix, str(key)))
    else:
        yield prefix, node


def value_at(config: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(config, dict) or key not in config:
            return ABSENT
        config = config[key]
    return config


@pytest.fixture(scope="module")
def conf_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of conf/ whose files a test may empty, one at a time (and restores)."""
    copy = tmp_path_factory.mktemp("conf") / "conf"
    shutil.copytree(CONF_DIR, copy)
    return copy


@pytest.mark.parametrize("selection", OPTIONS)
def test_no_preset_or_experiment_repeats_a_value_it_would_have_anyway(
    selection: str, conf_copy: Path
) -> None:
    """Each key a file sets is compared with the config composed from a copy of conf/ in which
    that file keeps its defaults list but sets nothing: a key that changes nothing is a second
    home for a default."""
    group, option = selection.split("=")
    text = (CONF_DIR / group / f"{option}.yaml").read_text()
    body = yaml.safe_load(text) or {}
    defaults = body.pop("defaults", None)
    global_package = text.startswith("# @package _global_")
    emptied = conf_copy / group / f"{option}.yaml"
    emptied.write_text(
        ("# @package _global_\n" if global_package else "")
        + yaml.safe_dump({"defaults": defaults} if defaults is not None else {})
    )
    try:
        baseline = unresolved(conf_copy, [selection, *REQUIRED.get(selection, [])])
    finally:
        emptied.write_text(text)
    package = () if global_package else (group,)
    # What a file sets is what composes (its `_self_` comes last): a key equal to the baseline
    # changes nothing.
    repeated = [
        ".".join(path) for path, value in leaves(body, package) if value_at(baseline, path) == value
    ]
    assert repeated == [], f"conf/{group}/{option}.yaml repeats what it would get anyway"


# What the default run's presets change on purpose: the model's display name (model=bert-tiny),
# the demo's task catalog (finetune=pydoc_topics), and the artifact root and tracking URI when
# the environment sets them (CLOZE_HOME, CLOZE_TRACKING_URI).
CHANGED_BY_DEFAULT_PRESETS = {
    "model": {"name"},
    "finetune": {"catalog"},
    "paths": {"root"},
    "tracking": {"uri"},
}


@pytest.mark.parametrize("group", sorted(set(GROUPS) - {"distill"}))
def test_the_default_run_is_the_classes_defaults(group: str) -> None:
    """A test that builds `TrainerSettings()` or `ObjectiveSettings()` trains the recipe
    `python -m flows` runs: the classes' defaults are the users' (distill is off by default)."""
    section = compose_config([])[group]
    cls = GROUPS[group]
    differing = {name for name in cls.model_fields if section[name] != default_of(cls, name)}
    assert differing <= CHANGED_BY_DEFAULT_PRESETS.get(group, set())


def test_every_task_preset_the_docs_list_is_a_finetune_option_that_runs_it() -> None:
    """docs/downstream-reference.md's task presets are what `finetune=<preset>` selects, as the
    README says; a task only the catalog defines would be refused as `not in conf/finetune/`."""
    reference = (CONF_DIR.parent / "docs" / "downstream-reference.md").read_text()
    section = reference.split("## Task presets", 1)[1].split("\n## ", 1)[0]
    presets = re.findall(r"^\| `(\w+)`", section, flags=re.MULTILINE)
    assert "squad_v2_fragment" in presets
    for preset in presets:
        assert compose_config([f"finetune={preset}"])["finetune"]["tasks"] == [preset], preset
