"""The opt-in half of the key rule: a field added to a keyed class stays out of its key while it
holds its default, and enters it once set, whether the class is pydantic or a dataclass."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import BaseModel

from flows.core.keys import opt_ins_at_default


class Keyed(BaseModel):
    size: int
    added: str | None = None
    flag: bool = False


@dataclass(frozen=True)
class Rules:
    mode: str = "fail"


def test_an_opt_in_at_its_default_is_left_out_and_one_set_off_it_is_kept() -> None:
    assert opt_ins_at_default(Keyed(size=1), ("added", "flag")) == {"added", "flag"}
    assert opt_ins_at_default(Keyed(size=1, added="x"), ("added", "flag")) == {"flag"}
    # an empty value is a value: only the declared default is left out
    assert opt_ins_at_default(Keyed(size=1, added=""), ("added",)) == set()


def test_a_dataclass_follows_the_same_rule() -> None:
    assert opt_ins_at_default(Rules(), ("mode",)) == {"mode"}
    assert opt_ins_at_default(Rules(mode="skip"), ("mode",)) == set()


@pytest.mark.parametrize("name", ["missing", "size"])
def test_an_opt_in_must_name_a_field_with_a_default(name: str) -> None:
    """A typo or a required field would silently key nothing or everything: refused."""
    with pytest.raises(ValueError, match=f"Keyed has no defaulted field \\['{name}'\\]"):
        opt_ins_at_default(Keyed(size=1), (name,))
