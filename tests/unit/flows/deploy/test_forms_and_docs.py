"""What the deployments' descriptions and the deployments guide say of the run forms, checked
against the forms themselves (issue 53, case 20: the guide gave `max_steps` as 3000 where the
form says 2000, and `domain-refresh` promised fields its form does not have)."""

from __future__ import annotations

import inspect
import re

import pytest

from flows.deploy.cli import deployment_options, flow_of
from flows.deploy.settings import DEPLOYMENTS, DeploymentSettings
from tests.guides import GUIDES, guide_quotes

TABLE_ROW = re.compile(r"^\| `(?P<field>\w+)` \| (?P<type>.*) \| .* \|$")


def guide_form_defaults() -> dict[str, str]:
    """The run form table of docs/guides/deployments.md: field -> the default it quotes, the
    last parenthesised value of the type column (`(2000)`, `(empty)`)."""
    rows = {}
    for line in (GUIDES / "deployments.md").read_text().splitlines():
        if (row := TABLE_ROW.match(line)) and (found := re.findall(r"\(([^()]*)\)", row["type"])):
            rows[row["field"]] = found[-1].strip("`")
    return rows


def shown(default: object) -> str:
    """A signature default as the guide writes it."""
    if default in ("", None, []):
        return "empty"
    if isinstance(default, list):
        return ", ".join(str(item) for item in default)
    return str(default)


def test_the_guides_run_form_table_quotes_each_fields_default() -> None:
    parameters = inspect.signature(flow_of("full").fn).parameters
    quoted = guide_form_defaults()
    assert set(quoted) == set(parameters)
    assert {name: shown(parameters[name].default) for name in quoted} == quoted


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_each_deployments_description_names_exactly_its_forms_fields(name: str) -> None:
    said = deployment_options(name, DeploymentSettings())["description"]
    [listed] = re.findall(r"a typed run form \(([^)]*)\) plus raw Hydra overrides", said)
    form = inspect.signature(flow_of(name).fn).parameters
    assert listed.split(", ") == [field for field in form if field != "overrides"]


def test_the_guide_says_what_the_domain_refresh_form_holds() -> None:
    form = inspect.signature(flow_of("domain-refresh").fn).parameters
    assert list(form) == ["experiment", "overrides"]
    guide_quotes("deployments.md", "`domain-refresh` takes `experiment` and `overrides`.")
