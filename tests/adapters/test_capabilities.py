"""What llama.cpp's own JSON Schema engine enforces, and what the adapter sends instead."""

from __future__ import annotations

import re

import pydantic
import pytest

from outlines_like.adapters import LlamaCppAdapter, OllamaAdapter, SGLangAdapter, VLLMAdapter
from outlines_like.adapters._common import BaseAdapter
from outlines_like.adapters.capabilities import (
    LLAMACPP_JSON_SCHEMA,
    XGRAMMAR_JSON_SCHEMA,
    keyword_uses,
    unenforced,
)
from outlines_like.errors import UnsupportedConstraintError
from outlines_like.types import JsonSchema, to_term


def test_keyword_uses_walk_every_subschema_with_pointers() -> None:
    schema = {
        "title": "T",
        "type": "object",
        "properties": {"a/b": {"type": "number", "minimum": 0}},
        "$defs": {"D": {"type": "string", "pattern": "x"}},
        "x-extension": 1,
    }
    uses = {(u.pointer, u.keyword, u.types) for u in keyword_uses(schema)}
    assert ("#/properties/a~1b/minimum", "minimum", ("number",)) in uses
    assert ("#/$defs/D/pattern", "pattern", ("string",)) in uses
    assert not any(u[1] in ("title", "x-extension", "$defs") for u in uses)


@pytest.mark.parametrize(
    ("schema", "dropped"),
    [
        ({"type": "integer", "minimum": 0, "maximum": 9}, []),
        ({"type": "number", "minimum": 0}, ["#/minimum"]),
        ({"type": "integer", "multipleOf": 5}, ["#/multipleOf"]),
        ({"type": "object", "minProperties": 1}, ["#/minProperties"]),
        ({"type": "string", "pattern": "^a+$"}, []),
        ({"type": "string", "pattern": "a+"}, ["#/pattern"]),
        ({"type": "string", "format": "date"}, []),
        ({"type": "string", "format": "email"}, ["#/format"]),
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, ["#/uniqueItems"]),
        ({"anyOf": [{"type": "integer"}, {"not": {"const": 1}}]}, ["#/anyOf/1/not"]),
    ],
)
def test_the_llamacpp_table(schema: dict[str, object], dropped: list[str]) -> None:
    assert [u.pointer for u in unenforced(LLAMACPP_JSON_SCHEMA, schema)] == dropped


class Score(pydantic.BaseModel):
    score: float = pydantic.Field(ge=0, le=1)


def test_a_schema_llamacpp_enforces_goes_natively() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}}
    fields = LlamaCppAdapter().constraint_fields(JsonSchema(schema), endpoint="chat")
    assert fields == {"extra_body": {"json_schema": schema}}


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_number_bounds_go_as_our_grammar(endpoint: str) -> None:
    """llama.cpp answered 660 for a 0..1 float; our GBNF bounds it."""
    fields = LlamaCppAdapter().constraint_fields(to_term(Score), endpoint=endpoint)  # type: ignore[arg-type]
    grammar = fields["extra_body"]["grammar"]
    assert "json_schema" not in fields["extra_body"]
    assert grammar.startswith("root ::=")
    assert re.search(r'"0" \("\." \[0-9\]\+\)\?', grammar)


def test_what_nobody_can_enforce_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedConstraintError) as info:
        LlamaCppAdapter().constraint_fields(
            JsonSchema(
                {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "minProperties": 2}
            ),
            endpoint="chat",
        )
    message = str(info.value)
    assert "'minProperties' at #/minProperties" in message
    assert "llama.cpp" in message
    assert "lenient=True" in message


def test_lenient_sends_the_schema_natively() -> None:
    schema = {"type": "integer", "multipleOf": 5}
    fields = LlamaCppAdapter().constraint_fields(JsonSchema(schema, lenient=True), endpoint="chat")
    marked = {**schema, "x-outlines-like-lenient": True}  # our server reads it; others ignore x-
    assert fields == {"extra_body": {"json_schema": marked}}


def test_xgrammar_table() -> None:
    def dropped(schema: dict[str, object]) -> list[str]:
        return [u.pointer for u in unenforced(XGRAMMAR_JSON_SCHEMA, schema)]

    assert dropped({"type": "number", "minimum": 0, "maximum": 1}) == []
    assert dropped({"type": "string", "maxLength": 3}) == []
    assert dropped({"type": "string", "pattern": "a+", "maxLength": 3}) == ["#/maxLength"]
    assert dropped({"type": "integer", "multipleOf": 2}) == ["#/multipleOf"]
    assert dropped({"type": "string", "format": "byte"}) == ["#/format"]


@pytest.mark.parametrize("adapter", [SGLangAdapter(), VLLMAdapter(), VLLMAdapter("0.8.5")])
def test_xgrammar_servers_refuse_by_name_what_they_and_we_would_drop(adapter: BaseAdapter) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "format": "idn-email"}}}
    with pytest.raises(UnsupportedConstraintError, match="'format' at #/properties/s/format"):
        adapter.constraint_fields(JsonSchema(schema), endpoint="chat")
    # a format they drop and we write (OpenAPI's base64 ``byte``) goes as our regex instead
    byte = JsonSchema({"type": "object", "properties": {"s": {"type": "string", "format": "byte"}}})
    sent = str(adapter.constraint_fields(byte, endpoint="chat"))
    assert "regex" in sent
    assert "[A-Za-z0-9+/]{4}" in sent
    native = adapter.constraint_fields(to_term(Score), endpoint="chat")  # xgrammar bounds floats
    assert "regex" not in str(native)


def test_ollama_has_no_field_for_our_form_and_says_so() -> None:
    with pytest.raises(UnsupportedConstraintError) as info:
        OllamaAdapter().constraint_fields(to_term(Score), endpoint="chat")
    assert "'minimum' at #/properties/score/minimum" in str(info.value)
    assert "takes no regex field" in str(info.value)


def test_the_docs_page_is_generated_from_the_tables() -> None:
    """docs/servers/enforcement.md shows the same tables the adapters use."""
    from pathlib import Path

    from outlines_like.adapters.capabilities import markdown

    page = Path(__file__).resolve().parents[2] / "docs" / "servers" / "enforcement.md"
    assert markdown() in page.read_text(encoding="utf-8"), (
        "regenerate the table: python -c 'from outlines_like.adapters.capabilities import "
        "markdown; print(markdown())'"
    )
