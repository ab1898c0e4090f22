"""The flat draft 2020-12 metaschema gives the official metaschema's verdict, faster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from outlines_like.errors import InvalidConstraintError
from outlines_like.types.json_schema_budget import (
    _flat_metaschema_2020_12,
    _passes_quickly,
    bounded_json_schema_regex,
)

SUITE = Path(__file__).parents[1] / "data" / "json-schema-test-suite" / "draft2020-12"
OFFICIAL = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)
FLAT = jsonschema.Draft202012Validator(_flat_metaschema_2020_12())

BROKEN: list[Any] = [
    {"type": "nope"},
    {"properties": {"a": {"minLength": -1}}},
    {"$defs": {"x": {"items": 3}}},
    {"anyOf": []},
    {"required": "a"},
    {"properties": {"a": {"$ref": 5}}},
    {"dependentRequired": {"a": [1]}},
    {"$defs": {"deep": {"properties": {"b": {"prefixItems": [{"enum": 1}]}}}}},
    {"if": {"const": 1}, "then": {"maxItems": "2"}},
    {"$anchor": "not an anchor"},
]


def _suite_schemas() -> list[Any]:
    schemas: list[Any] = []
    for path in sorted(SUITE.rglob("*.json")):
        schemas.extend(group["schema"] for group in json.loads(path.read_text()))
    return schemas


def test_flat_metaschema_agrees_with_the_official_one_on_the_suite() -> None:
    schemas = _suite_schemas()
    assert len(schemas) > 300
    for schema in schemas + BROKEN:
        assert FLAT.is_valid(schema) == OFFICIAL.is_valid(schema), schema


@pytest.mark.parametrize("schema", BROKEN)
def test_broken_schemas_fail_the_quick_check_and_the_full_one_names_where(schema: Any) -> None:
    declared = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    assert not _passes_quickly(declared)
    with pytest.raises(InvalidConstraintError, match="invalid JSON Schema at #"):
        bounded_json_schema_regex(declared, budget=16_000)
