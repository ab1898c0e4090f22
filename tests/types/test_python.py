"""Python types -> terms: every mapping, with accept and reject lists."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import re
from typing import Annotated, Literal, Optional, Union

import pydantic
import pytest
from typing_extensions import TypedDict

from outlines_like.errors import UnsupportedConstraintError
from outlines_like.types import (
    CFG,
    Alternatives,
    Choice,
    JsonObject,
    JsonSchema,
    Regex,
    integer,
    to_regex,
    to_term,
)


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 10


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=5)
    age: int = pydantic.Field(ge=0, le=130)


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


def lookup(city: str, days: int = 1) -> None:
    """Look up the weather."""


SCALARS: list[tuple[object, list[str], list[str]]] = [
    (int, ["0", "-7", "123"], ["1.5", "", "abc", "007"]),
    (float, ["1", "-0.25", "6.02e23"], ["1.", "abc", "NaN"]),
    (bool, ["true", "false"], ["True", "1", "yes"]),
    (dt.date, ["2024-01-31"], ["2024-1-31", "31/01/2024"]),
    (dt.time, ["08:30:00"], ["8:30", "25:00:00"]),
    (dt.datetime, ["2024-01-31T08:30:00Z"], ["2024-01-31"]),
    (Literal["yes", "no"], ["yes", "no"], ["Yes", '"yes"', "maybe"]),
    (Literal[1, 2, "x"], ["1", "2", "x"], ["3", '"x"']),
    (Literal[True, None], ["true", "null"], ["True", "None"]),
    (Color, ["red", "green"], ["RED", "blue"]),
    (Level, ["1", "10"], ["LOW", "2"]),
]


@pytest.mark.parametrize(("tp", "good", "bad"), SCALARS, ids=[str(s[0]) for s in SCALARS])
def test_scalar_types(tp: object, good: list[str], bad: list[str]) -> None:
    pattern = to_regex(tp)
    for text in good:
        assert re.fullmatch(pattern, text), (pattern, text)
    for text in bad:
        assert not re.fullmatch(pattern, text), (pattern, text)


CONTAINERS: list[tuple[object, list[str], list[str]]] = [
    (list[int], ["[]", "[1]", "[1,-2,3]"], ["[1,]", "[1, 2]", "1", "[a]"]),
    (list[str], ["[]", '["a","b c"]'], ["[a]", '["a",]']),
    (tuple[int, str], ['[1,"a"]'], ["[1]", '["a",1]', '[1,"a",2]']),
    (dict[str, int], ["{}", '{"a":1}', '{"a":1,"b":2}'], ['{"a":"1"}', "{a:1}"]),
    (list[dt.date], ['["2024-01-31"]'], ["[2024-01-31]", '["2024-13-01"]']),
    (list[bool], ["[true,false]"], ["[True]"]),
    (Optional[int], ["5", "null"], ["None", ""]),
    (Union[int, bool], ["5", "true"], ["x"]),
    (int | None, ["5", "null"], ["none"]),
    (list[Literal["a", "b"]], ['["a","b"]'], ['["c"]', "[a]"]),
    (
        Person,
        ['{"name":"Ann","age":30}'],
        ['{"name":"Annabel","age":30}', '{"name":"A","age":131}'],
    ),
    (Point, ['{"x":1,"y":-2}'], ['{"x":1}', '{"y":1,"x":2}']),
    (Movie, ['{"title":"Up","year":2009}'], ['{"title":"Up"}']),
    (list[Point], ['[{"x":1,"y":2}]', "[]"], ['[{"x":1}]']),
    (Annotated[int, pydantic.Field(ge=0, le=999)], ["0", "999"], ["-1", "1000"]),
    (Annotated[str, pydantic.Field(max_length=3)], ['"abc"', '""'], ['"abcd"', "abc"]),
    (pydantic.conint(ge=10, lt=20), ["10", "19"], ["9", "20"]),
]


@pytest.mark.parametrize(("tp", "good", "bad"), CONTAINERS, ids=[str(c[0]) for c in CONTAINERS])
def test_containers_and_models_use_json_style(tp: object, good: list[str], bad: list[str]) -> None:
    pattern = to_regex(tp)
    for text in good:
        assert re.fullmatch(pattern, text), (pattern, text)
    for text in bad:
        assert not re.fullmatch(pattern, text), (pattern, text)


@pytest.mark.parametrize(
    ("tp", "kind"),
    [
        (None, type(None)),
        (str, type(None)),
        (int, Regex),
        (Literal["a", "b"], Choice),
        (Literal[1, "a"], Alternatives),
        (Color, Choice),
        (Person, JsonSchema),
        (Point, JsonSchema),
        (Movie, JsonSchema),
        (list[int], JsonSchema),
        (Optional[int], JsonSchema),
        (dict, JsonObject),
        (lookup, JsonSchema),
        (CFG("start: 'a'"), CFG),
        (integer | Regex("x"), Alternatives),
        ({"type": "integer"}, JsonSchema),
    ],
)
def test_term_kinds(tp: object, kind: type) -> None:
    assert isinstance(to_term(tp), kind)


def test_models_keep_their_python_type_for_parsing() -> None:
    term = to_term(Person)
    assert isinstance(term, JsonSchema)
    assert term.python_type is Person


def test_function_signature_becomes_a_schema() -> None:
    term = to_term(lookup)
    assert isinstance(term, JsonSchema)
    schema = term.schema
    assert schema["properties"]["days"]["default"] == 1
    assert schema["required"] == ["city"]


def test_union_with_a_term_is_alternatives() -> None:
    term = to_term(Union[Regex("a"), Regex("b")])  # type: ignore[valid-type]
    assert re.fullmatch(to_regex(term), "b")


@pytest.mark.parametrize("tp", [object, complex, type, 3, "text", lambda *a: None])
def test_unsupported_types_say_what_works(tp: object) -> None:
    with pytest.raises(UnsupportedConstraintError) as info:
        to_term(tp)
    assert "pydantic" in str(info.value) or "args" in str(info.value)
