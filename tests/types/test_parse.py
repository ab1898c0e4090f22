"""Typed parsing: text -> the promised Python value, or a ParseError quoting the text."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from typing import Annotated, Literal, Optional

import pydantic
import pytest
from typing_extensions import TypedDict

from outlines_like.errors import ParseError
from outlines_like.types import JsonObject, JsonSchema, Regex, integer, parse


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Person(pydantic.BaseModel):
    name: str
    age: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


@pytest.mark.parametrize(
    ("tp", "text", "value"),
    [
        (None, "free text", "free text"),
        (str, "x", "x"),
        (int, "42", 42),
        (int, " -3 ", -3),
        (float, "2.5e3", 2500.0),
        (bool, "true", True),
        (bool, "False", False),
        (dt.date, "2024-02-29", dt.date(2024, 2, 29)),
        (dt.time, "08:30:00", dt.time(8, 30)),
        (
            dt.datetime,
            "2024-01-31T08:30:00Z",
            dt.datetime(2024, 1, 31, 8, 30, tzinfo=dt.timezone.utc),
        ),
        (Literal["yes", "no"], "no", "no"),
        (Literal[1, 2], "2", 2),
        (Color, "green", Color.GREEN),
        (Person, '{"name":"Ann","age":3}', Person(name="Ann", age=3)),
        (Point, '{"x":1,"y":2}', Point(1, 2)),
        (Movie, '{"title":"Up","year":2009}', {"title": "Up", "year": 2009}),
        (list[int], "[1, 2]", [1, 2]),
        (tuple[int, str], '[1,"a"]', (1, "a")),
        (dict[str, int], '{"a":1}', {"a": 1}),
        (Optional[int], "null", None),
        (dict, '{"any": [1, {"x": null}]}', {"any": [1, {"x": None}]}),
        (JsonObject(), "{}", {}),
        (JsonSchema({"type": "array", "items": {"type": "integer"}}), "[1]", [1]),
        (Regex("[a-z]+"), "abc", "abc"),
        (integer, "12", "12"),
        ({"type": "object", "properties": {"a": {"type": "integer"}}}, '{"a":1}', {"a": 1}),
    ],
)
def test_parse_gives_the_value(tp: object, text: str, value: object) -> None:
    assert parse(tp, text) == value


@pytest.mark.parametrize(
    ("tp", "text", "why"),
    [
        (int, "4.2", "integer"),
        (bool, "yes", "true or false"),
        (dt.date, "2024-13-01", "ISO 8601"),
        (Literal["yes", "no"], "maybe", "one of"),
        (Color, "blue", "one of"),
        (Person, '{"name":"Ann"}', "age"),
        (Person, "{not json", "Invalid JSON"),
        (list[int], '["a"]', "0"),
        (dict, "[1]", "JSON object"),
        (JsonSchema({"type": "integer", "minimum": 3}), "2", "minimum"),
        (JsonSchema({"type": "integer"}), "x", "invalid JSON"),
        (Regex("[a-z]+"), "ABC", "regex"),
        ({"type": "integer", "maximum": 3}, "4", "maximum"),
        (Annotated[int, pydantic.Field(le=3)], "4", "less than or equal"),
    ],
)
def test_parse_errors_quote_the_text(tp: object, text: str, why: str) -> None:
    with pytest.raises(ParseError) as info:
        parse(tp, text)
    message = str(info.value)
    assert repr(text)[:20] in message
    assert why.lower() in message.lower()
    assert info.value.text == text
    assert isinstance(info.value, ValueError)


def test_long_text_is_shortened_in_the_message() -> None:
    with pytest.raises(ParseError) as info:
        parse(int, "x" * 1000)
    assert len(str(info.value)) < 400


def test_top_level_uuid_decimal_and_set() -> None:
    """UUID and Decimal work at the top level as they do as fields; a set is made as a list."""
    import decimal
    import re
    import uuid

    from outlines_like.types import parse, to_regex, to_term

    text = "123e4567-e89b-12d3-a456-426614174000"
    assert re.fullmatch(to_regex(uuid.UUID), text)
    assert parse(uuid.UUID, text) == uuid.UUID(text)
    assert re.fullmatch(to_regex(decimal.Decimal), "-1.50")
    assert parse(decimal.Decimal, "-1.50") == decimal.Decimal("-1.50")
    term = to_term(set[int])
    assert "uniqueItems" not in term.schema_json  # type: ignore[union-attr]
    assert parse(set[int], "[1, 1, 2]") == {1, 2}
