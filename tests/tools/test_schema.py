"""Tool schemas from Python functions (``outlines_like.tools.schema``)."""

from __future__ import annotations

import enum
from typing import Any, Literal, Optional

import pytest
from pydantic import BaseModel

from outlines_like.tools import (
    parse_docstring,
    tool_choice,
    tool_schema,
)

# ---------------------------------------------------------------- schemas


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


class Place(BaseModel):
    city: str
    country: str = "FR"


def weather(place: Place, unit: Unit = Unit.C, days: Optional[int] = None) -> str:
    """Get the weather forecast.

    Uses the national service.

    Args:
        place: Where to look.
        unit (Unit): The unit,
            celsius or fahrenheit.
        days: How many days ahead.

    Returns:
        A short text.
    """
    return f"{place.city}: sunny in {unit.value} for {days}"


def numpy_style(a: int, b: Literal["x", "y"] = "x") -> None:
    """Add things.

    Parameters
    ----------
    a : int
        The first,
        really.
    b : str
        The second.

    Returns
    -------
    None
    """


def rest_style(a: float, flag: bool = False) -> None:
    """Do it.

    :param a: The amount.
    :param bool flag: Whether to.
    :returns: nothing.
    """


def bare(x, y: list[str]) -> None:  # type: ignore[no-untyped-def]
    pass


def test_tool_schema_google_docstring_pydantic_enum_optional() -> None:
    tool = tool_schema(weather)
    assert tool["type"] == "function"
    fn = tool["function"]
    assert fn["name"] == "weather"
    assert fn["description"] == "Get the weather forecast.\n\nUses the national service."
    params = fn["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["place"]
    props = params["properties"]
    assert props["place"]["description"] == "Where to look."
    assert props["place"]["$ref"] == "#/$defs/Place"
    assert params["$defs"]["Place"]["required"] == ["city"]
    assert props["unit"]["description"] == "The unit, celsius or fahrenheit."
    assert props["unit"]["default"] == "celsius"
    assert props["days"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert props["days"]["default"] is None
    assert "title" not in params
    assert "title" not in props["days"]


@pytest.mark.parametrize(
    ("fn", "description", "params"),
    [
        (numpy_style, "Add things.", {"a": "The first, really.", "b": "The second."}),
        (rest_style, "Do it.", {"a": "The amount.", "flag": "Whether to."}),
        (bare, "", {}),
    ],
)
def test_docstring_styles(fn: Any, description: str, params: dict[str, str]) -> None:
    assert parse_docstring(fn.__doc__) == (description, params)


def test_tool_schema_types_defaults_literal() -> None:
    props = tool_schema(numpy_style)["function"]["parameters"]["properties"]
    assert props["a"] == {"type": "integer", "description": "The first, really."}
    assert props["b"]["enum"] == ["x", "y"]
    assert props["b"]["default"] == "x"
    props = tool_schema(bare)["function"]["parameters"]["properties"]
    assert props["x"] == {}  # no annotation: any JSON value
    assert props["y"] == {"type": "array", "items": {"type": "string"}}


def test_tool_schema_overrides_and_strict() -> None:
    tool = tool_schema(weather, name="wx", description="d", strict=True)
    fn = tool["function"]
    assert (fn["name"], fn["description"], fn.get("strict")) == ("wx", "d", True)
    params = fn["parameters"]
    assert params["required"] == ["place", "unit", "days"]
    assert params["additionalProperties"] is False
    assert params["$defs"]["Place"]["additionalProperties"] is False


def _star(*args: int) -> None: ...


def _kw(**kwargs: int) -> None: ...


@pytest.mark.parametrize(
    ("fn", "kwargs", "error", "match"),
    [
        (_star, {}, TypeError, r"\*args/\*\*kwargs"),
        (_kw, {}, TypeError, r"\*args/\*\*kwargs"),
        (lambda x: x, {}, TypeError, "no usable name"),
        (42, {}, TypeError, "must be a function"),
        (weather, {"name": "bad name!"}, ValueError, "not allowed"),
    ],
)
def test_tool_schema_rejects(fn: Any, kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        tool_schema(fn, **kwargs)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("required", "required"),
        ("auto", "auto"),
        ("none", "none"),
        ("get_weather", {"type": "function", "function": {"name": "get_weather"}}),
        (weather, {"type": "function", "function": {"name": "weather"}}),
    ],
)
def test_tool_choice(target: Any, expected: object) -> None:
    assert tool_choice(target) == expected
