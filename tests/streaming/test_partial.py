"""Partial JSON: prefixes closed into values, partial objects as an answer streams."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import pathlib
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from typing_extensions import TypedDict

from outlines_like.errors import ParseError
from outlines_like.streaming import (
    aiter_partial,
    iter_partial,
    partial_json,
)
from outlines_like.types import CFG, JsonSchema, Regex

RECORDINGS = pathlib.Path(__file__).parent / "recordings"


# ---------------------------------------------------------------- partial JSON


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("  ", None),
        ("-", None),
        ("tr", None),
        ("{", {}),
        ('{"na', {}),
        ('{"name"', {}),
        ('{"name": ', {}),
        ('{"name": "Al', {"name": "Al"}),
        ('{"name": "Al\\', {"name": "Al"}),
        ('{"name": "A\\u00e9', {"name": "Aé"}),
        ('{"a": 1, ', {"a": 1}),
        ('{"a": 1.', {}),
        ('{"a": [1, 2, {"b": tr', {"a": [1, 2, {}]}),
        ('[1, "x', [1, "x"]),
        ('"ab', "ab"),
        ('{"a": {"b": [true, null]}}', {"a": {"b": [True, None]}}),
        ("12", 12),
    ],
)
def test_partial_json(text: str, expected: object) -> None:
    assert partial_json(text) == expected


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(value=_JSON, indent=st.sampled_from([None, 1]))
def test_every_prefix_of_json_is_accepted_and_the_whole_is_exact(
    value: object, indent: int | None
) -> None:
    text = json.dumps(value, indent=indent)
    for cut in range(len(text)):
        partial_json(text[:cut])  # never raises on a prefix of valid JSON
    assert partial_json(text) == value


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{'a': 1}", "not the start of a JSON value"),
        ('{"a": 1} x', "text after"),
        ("{]", "not the start"),
    ],
)
def test_partial_json_rejects_non_json(text: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        partial_json(text)


class Character(BaseModel):
    name: str
    age: int
    role: Literal["hero", "villain"]
    tags: list[str] = []


class Party(BaseModel):
    members: list[Character]


class Point(TypedDict):
    x: int
    y: int


@dataclasses.dataclass
class Box:
    w: int


def _chunks(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def test_iter_partial_pydantic_model() -> None:
    text = '{"name": "Bob", "age": 42, "role": "villain", "tags": ["a", "b"]}'
    values = list(iter_partial(_chunks(text), Character))
    assert values[-1] == Character(name="Bob", age=42, role="villain", tags=["a", "b"])
    partials = values[:-1]
    assert all(isinstance(v, Character) for v in partials)
    names = [v.__dict__.get("name") for v in partials]
    assert "Bo" in names  # a half-streamed string is shown as it grows
    roles = {v.__dict__.get("role") for v in partials}
    assert roles <= {None, "villain"}  # half a Literal is never shown
    assert len({repr(v) for v in values}) == len(values)  # no repeated partials


def test_iter_partial_nested_models_and_other_types() -> None:
    text = '{"members": [{"name": "A", "age": 1, "role": "hero"}, {"name": "B"'
    values = list(iter_partial(_chunks(text + ', "age": 2, "role": "hero"}]}', 5), Party))
    assert isinstance(values[-1], Party)
    assert [m.name for m in values[-1].members] == ["A", "B"]
    mids = [v for v in values[:-1] if len(v.__dict__.get("members", [])) == 2]
    assert mids
    assert mids[0].members[1].__dict__.get("name") is None  # the new member starts empty
    assert any(v.members[1].__dict__.get("name") == "B" for v in mids)
    assert list(iter_partial(['{"x": 1', ', "y": 2}'], Point)) == [{"x": 1}, {"x": 1, "y": 2}]
    assert list(iter_partial(['{"w"', ": 3}"], Box))[-1] == Box(3)
    assert list(iter_partial(["[1, ", "2]"], list[int])) == [[1], [1, 2]]
    assert list(iter_partial(["[1, ", "2] "], None)) == [[1], [1, 2]]
    assert list(iter_partial(["4", "2"], int)) == [42]  # no partial int: "4" may grow


class Shade(enum.Enum):
    BLUE = "blue"


@pytest.mark.parametrize(
    ("chunks", "output_type", "expected"),
    [
        (['{"a"', ": 1}"], JsonSchema({"type": "object"}), [{}, {"a": 1}]),
        (["ab", "c-12"], Regex(r"[a-z]+-[0-9]+"), ["abc-12"]),
        (["answer: ", "yes."], CFG('start: "answer: " ("yes" | "no") "."'), ["answer: yes."]),
        (["gre", "en"], Literal["red", "green"], ["green"]),
        (["2024-", "02-29"], dt.date, [dt.date(2024, 2, 29)]),
        (["bl", "ue"], Shade, [Shade.BLUE]),
    ],
)
def test_iter_partial_takes_every_type_parse_takes(
    chunks: list[str], output_type: object, expected: list[Any]
) -> None:
    assert list(iter_partial(chunks, output_type)) == expected


async def test_aiter_partial_matches_iter_partial() -> None:
    text = '{"name": "Bob", "age": 42, "role": "hero"}'

    async def gen() -> Any:
        for chunk in _chunks(text, 4):
            yield chunk

    got = [v async for v in aiter_partial(gen(), Character)]
    assert got == list(iter_partial(_chunks(text, 4), Character))
    assert got[-1] == Character(name="Bob", age=42, role="hero")


@pytest.mark.parametrize(
    ("chunks", "output_type", "match"),
    [
        (["{'a'"], None, "not JSON"),
        (['{"a": 1}', " extra"], None, "text after"),
        (['{"a": 1', ""], None, "ended inside"),
        ([" "], None, "before any JSON"),
        (['{"name": "x"}'], Character, "cannot read"),
    ],
)
def test_iter_partial_errors(chunks: list[str], output_type: Any, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        list(iter_partial(chunks, output_type))
