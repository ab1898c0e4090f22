"""Reading constraints from every request dialect (pure: no model, no server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from outlines_like.server.dialects import RequestError, read_constraint
from outlines_like.types import CFG, Choice, JsonObject, JsonSchema, Regex

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
GBNF = 'root ::= "answer: " ("yes" | "no")'
LARK = 'start: "answer: " ("yes" | "no")'


@pytest.mark.parametrize(
    ("body", "kind", "field"),
    [
        ({"regex": "[0-9]+"}, Regex, "regex"),
        ({"ebnf": GBNF}, CFG, "ebnf"),
        ({"json_schema": json.dumps(SCHEMA)}, JsonSchema, "json_schema"),  # SGLang: text
        ({"json_schema": SCHEMA}, JsonSchema, "json_schema"),  # llama.cpp: object
        ({"grammar": GBNF}, CFG, "grammar"),
        ({"structured_outputs": {"regex": "a+"}}, Regex, "structured_outputs.regex"),
        ({"structured_outputs": {"choice": ["a", "b"]}}, Choice, "structured_outputs.choice"),
        ({"structured_outputs": {"json": SCHEMA}}, JsonSchema, "structured_outputs.json"),
        ({"structured_outputs": {"grammar": LARK}}, CFG, "structured_outputs.grammar"),
        (
            {"structured_outputs": {"json_object": True}},
            JsonObject,
            "structured_outputs.json_object",
        ),
        ({"guided_regex": "a+"}, Regex, "guided_regex"),
        ({"guided_json": SCHEMA}, JsonSchema, "guided_json"),
        ({"guided_choice": ["x"]}, Choice, "guided_choice"),
        ({"guided_grammar": LARK}, CFG, "guided_grammar"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": SCHEMA},
                }
            },
            JsonSchema,
            "response_format.json_schema",
        ),
        ({"response_format": {"type": "json_object"}}, JsonObject, "response_format"),
        (
            {"response_format": {"type": "json_object", "schema": SCHEMA}},
            JsonSchema,
            "response_format.schema",
        ),
    ],
)
def test_every_dialect_field_is_read(body: dict[str, Any], kind: type, field: str) -> None:
    spec = read_constraint(body)
    assert spec is not None
    assert isinstance(spec.term, kind)
    assert spec.field == field


def test_grammar_syntax_is_detected() -> None:
    gbnf = read_constraint({"grammar": GBNF})
    lark = read_constraint({"grammar": LARK})
    assert gbnf is not None
    assert lark is not None
    assert gbnf.term.syntax == "ebnf"  # type: ignore[attr-defined]
    assert lark.term.syntax == "lark"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"messages": []},
        {"response_format": {"type": "text"}},
        {"structured_outputs": {"json_object": False}},
        {"regex": None},
    ],
)
def test_no_constraint(body: dict[str, Any]) -> None:
    assert read_constraint(body) is None


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"regex": "[a-"}, "regex", "regex"),
        ({"regex": ""}, "regex", "non-empty"),
        ({"regex": 3}, "regex", "string"),
        ({"json_schema": "{not json"}, "json_schema", "not valid JSON"),
        ({"json_schema": [1]}, "json_schema", "JSON Schema object"),
        ({"structured_outputs": "a+"}, "structured_outputs", "object"),
        ({"structured_outputs": {"structural_tag": {}}}, "structured_outputs", "unsupported"),
        ({"structured_outputs": {"choice": []}}, "structured_outputs.choice", "non-empty list"),
        ({"structured_outputs": {"choice": [1]}}, "structured_outputs.choice", "strings"),
        (
            {"structured_outputs": {"json_object": "yes"}},
            "structured_outputs.json_object",
            "boolean",
        ),
        ({"response_format": {"type": "xml"}}, "response_format.type", "json_schema"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "schema"),
        ({"response_format": "json"}, "response_format", "object"),
        ({"regex": "a", "guided_regex": "b"}, "regex", "conflicting"),
        (
            {"structured_outputs": {"regex": "a", "choice": ["b"]}},
            "structured_outputs.regex",
            "conflicting",
        ),
        (
            {"regex": "a", "response_format": {"type": "json_object"}},
            "response_format",
            "conflicting",
        ),
    ],
)
def test_bad_constraints_name_the_field(body: dict[str, Any], param: str, words: str) -> None:
    with pytest.raises(RequestError, match=words) as info:
        read_constraint(body)
    assert info.value.param == param
    assert info.value.status == 400
