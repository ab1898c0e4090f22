"""OpenAI strict-mode rewrites and the other schema helpers of the adapters."""

from __future__ import annotations

import copy
import json
from typing import Annotated, Any, Literal, Optional, Union

import pydantic
import pytest

from outlines_like.adapters._schema import close_objects, schema_name, to_openai_strict
from outlines_like.errors import UnsupportedConstraintError


class Pet(pydantic.BaseModel):
    name: str
    kind: Literal["cat", "dog"] = "cat"
    age: Optional[int] = None


class Owner(pydantic.BaseModel):
    pet: Pet
    nick: str = pydantic.Field(default="x", description="a nickname")


class Tree(pydantic.BaseModel):
    value: int
    children: list[Tree]


class Cat(pydantic.BaseModel):
    type: Literal["cat"]
    lives: int


class Dog(pydantic.BaseModel):
    type: Literal["dog"]
    good: bool


class Home(pydantic.BaseModel):
    animal: Annotated[Union[Cat, Dog], pydantic.Field(discriminator="type")]


def obj(props: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props, **extra}
    if required is not None:
        out["required"] = required
    return out


STRICT_CASES = [
    pytest.param(
        obj({"a": {"type": "string"}}),
        obj({"a": {"type": ["string", "null"]}}, ["a"], additionalProperties=False),
        id="optional-becomes-nullable",
    ),
    pytest.param(
        obj({"a": {"type": "integer"}, "b": {"type": "integer"}}, ["b"]),
        obj(
            {"a": {"type": ["integer", "null"]}, "b": {"type": "integer"}},
            ["a", "b"],
            additionalProperties=False,
        ),
        id="required-stays-non-null",
    ),
    pytest.param(
        obj({"c": {"type": "string", "enum": ["x", "y"]}}),
        obj(
            {"c": {"anyOf": [{"type": "string", "enum": ["x", "y"]}, {"type": "null"}]}},
            ["c"],
            additionalProperties=False,
        ),
        id="optional-enum-anyOf-null",
    ),
    pytest.param(
        obj({"c": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}}),
        obj(
            {"c": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
            ["c"],
            additionalProperties=False,
        ),
        id="already-nullable-default-dropped",
    ),
    pytest.param(
        obj({"k": {"const": "v"}}, ["k"]),
        obj({"k": {"enum": ["v"]}}, ["k"], additionalProperties=False),
        id="const-to-enum",
    ),
    pytest.param(
        obj({"n": {"allOf": [{"type": "integer", "minimum": 1}], "description": "d"}}, ["n"]),
        obj(
            {"n": {"type": "integer", "minimum": 1, "description": "d"}},
            ["n"],
            additionalProperties=False,
        ),
        id="single-allOf-inlined",
    ),
    pytest.param(
        obj(
            {"p": {"$ref": "#/$defs/P", "description": "the p"}},
            ["p"],
            **{"$defs": {"P": obj({"x": {"type": "number"}}, ["x"])}},
        ),
        obj(
            {
                "p": obj(
                    {"x": {"type": "number"}},
                    ["x"],
                    description="the p",
                    additionalProperties=False,
                )
            },
            ["p"],
            additionalProperties=False,
            **{"$defs": {"P": obj({"x": {"type": "number"}}, ["x"], additionalProperties=False)}},
        ),
        id="ref-with-siblings-inlined",
    ),
    pytest.param(
        {"$ref": "#/$defs/R", "$defs": {"R": obj({"x": {"type": "boolean"}}, ["x"])}},
        {
            **obj({"x": {"type": "boolean"}}, ["x"], additionalProperties=False),
            "$defs": {"R": obj({"x": {"type": "boolean"}}, ["x"], additionalProperties=False)},
        },
        id="root-ref-inlined",
    ),
    pytest.param(
        obj({"s": {"type": "string", "format": "date", "pattern": "^2"}}, ["s"]),
        obj(
            {"s": {"type": "string", "format": "date", "pattern": "^2"}},
            ["s"],
            additionalProperties=False,
        ),
        id="supported-keywords-kept",
    ),
    pytest.param(
        obj({"l": {"type": "array", "items": obj({"a": {"type": "integer"}}), "maxItems": 3}}),
        obj(
            {
                "l": {
                    "type": ["array", "null"],
                    "items": obj(
                        {"a": {"type": ["integer", "null"]}}, ["a"], additionalProperties=False
                    ),
                    "maxItems": 3,
                }
            },
            ["l"],
            additionalProperties=False,
        ),
        id="array-items-object-closed",
    ),
]


@pytest.mark.parametrize(("schema", "want"), STRICT_CASES)
def test_strict_rewrite(schema: dict[str, Any], want: dict[str, Any]) -> None:
    before = copy.deepcopy(schema)
    assert to_openai_strict(schema) == want
    assert schema == before  # the input is never mutated


def test_strict_pydantic_models() -> None:
    owner = to_openai_strict(Owner.model_json_schema())
    pet = owner["$defs"]["Pet"]
    assert pet["required"] == ["name", "kind", "age"]
    assert pet["additionalProperties"] is False
    assert pet["properties"]["age"] == {
        "anyOf": [{"type": "integer"}, {"type": "null"}],
        "title": "Age",
    }
    assert "default" not in json.dumps(owner)
    assert owner["properties"]["nick"]["type"] == ["string", "null"]
    assert owner["properties"]["nick"]["description"] == "a nickname"


def test_strict_recursive_model() -> None:
    tree = to_openai_strict(Tree.model_json_schema())
    assert tree["$defs"]["Tree"]["additionalProperties"] is False
    assert tree["$defs"]["Tree"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Tree"}


def test_strict_discriminated_union() -> None:
    home = to_openai_strict(Home.model_json_schema())
    animal = home["properties"]["animal"]
    assert "oneOf" not in animal
    assert "discriminator" not in animal
    assert animal["anyOf"] == [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "array", "items": {"type": "integer"}}, ("object at the root", "'array'")),
        ({"type": "string"}, ("object at the root",)),
        ({"anyOf": [obj({}), {"type": "null"}]}, ("object at the root", "anyOf")),
        (obj({"name": {"type": "string", "minLength": 2}}), ("'minLength'", "#/properties/name")),
        (obj({"t": {"type": "array", "uniqueItems": True}}), ("'uniqueItems'", "#/properties/t")),
        (obj({"a": {"type": "integer"}}, patternProperties={}), ("'patternProperties'", "at #")),
        (obj({"a": {"not": {"type": "null"}}}), ("'not'",)),
        (obj({"a": {"allOf": [{"type": "integer"}, {"minimum": 1}]}}), ("'allOf'",)),
        (obj({"a": {"oneOf": [{"type": "integer"}, {"type": "string"}]}}), ("'oneOf'", "anyOf")),
        (obj({"a": {"type": "string", "format": "uri"}}), ("format 'uri'", "pattern")),
        (
            obj({"a": {"type": "object", "additionalProperties": {"type": "integer"}}}),
            ("additionalProperties false", "#/properties/a"),
        ),
        (obj({"a": {"type": "object"}}), ("named properties", "#/properties/a")),
        (obj({"a": {}}), ("needs a 'type'", "#/properties/a")),
        (obj({"a": True}), ("boolean schema",)),
        (obj({"a": {"$ref": "http://x/s.json", "description": "d"}}), ("not local",)),
        (obj({"a": {"$ref": "#/$defs/Nope", "description": "d"}}), ("points nowhere",)),
        (obj({"a": {"type": "array", "prefixItems": [{"type": "integer"}]}}), ("'prefixItems'",)),
    ],
)
def test_strict_rejects_what_openai_cannot_take(
    schema: dict[str, Any], words: tuple[str, ...]
) -> None:
    with pytest.raises(UnsupportedConstraintError) as info:
        to_openai_strict(schema)
    message = str(info.value)
    assert "OpenAI strict mode" in message
    for word in words:
        assert word in message, (word, message)


def _nested(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = obj({"leaf": {"type": "integer"}}, ["leaf"])
    for _ in range(levels - 1):
        node = obj({"child": node}, ["child"])
    return node


def test_strict_size_limits() -> None:
    to_openai_strict(_nested(10))
    with pytest.raises(UnsupportedConstraintError, match="10 levels"):
        to_openai_strict(_nested(11))
    many = obj({f"p{i}": {"type": "integer"} for i in range(5001)})
    with pytest.raises(UnsupportedConstraintError, match="5000 object properties"):
        to_openai_strict(many)
    enums = obj({"e": {"type": "string", "enum": [str(i) for i in range(1001)]}}, ["e"])
    with pytest.raises(UnsupportedConstraintError, match="1000 enum values"):
        to_openai_strict(enums)


def test_close_objects_does_not_touch_the_input() -> None:
    schema = obj({"a": obj({"b": {"type": "integer"}})}, anyOf=[obj({"c": {"type": "null"}})])
    before = copy.deepcopy(schema)
    closed = close_objects(schema)
    assert schema == before
    assert closed["additionalProperties"] is False
    assert closed["properties"]["a"]["additionalProperties"] is False
    assert closed["anyOf"][0]["additionalProperties"] is False


@pytest.mark.parametrize(
    ("schema", "name"),
    [({"title": "A b/c"}, "A_b_c"), ({"title": "  "}, "output"), ({"title": 3}, "output")],
)
def test_schema_name(schema: dict[str, Any], name: str) -> None:
    assert schema_name(schema) == name
