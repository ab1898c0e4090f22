"""What the translation keeps between sub-schemas (flatten, $ref resolutions) changes no output."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from outlines_like.errors import InvalidConstraintError
from outlines_like.types._terms import too_deep_at
from outlines_like.types.json_schema import json_schema_to_regex
from outlines_like.types.json_schema._driver import _Converter
from outlines_like.types.json_schema_grammar import json_schema_path, json_schema_to_grammar


def _converter(root: dict[str, Any]) -> _Converter:
    return _Converter(
        root, whitespace_pattern=None, lenient=False, max_recursion_depth=3, max_any_depth=2
    )


def test_flatten_hands_out_a_fresh_dict_each_time() -> None:
    root = {"$defs": {"a": {"type": "string", "enum": ["x", "y"]}}, "$ref": "#/$defs/a"}
    converter = _converter(root)
    first = converter.flatten(root, "#", [], ())
    first.pop("enum")  # callers take keywords out of the top level (enum, anyOf ...)
    refs: list[str] = []
    again = converter.flatten(root, "#", refs, ())
    assert again == {"type": "string", "enum": ["x", "y"]}
    assert refs == ["#/$defs/a"]  # the refs followed are reported on a kept result too


def test_flatten_kept_per_refs_being_followed() -> None:
    root = {"$defs": {"a": {"$ref": "#/$defs/a"}}}
    converter = _converter(root)
    target = root["$defs"]["a"]
    with pytest.raises(InvalidConstraintError, match="refers to itself"):
        converter.flatten(target, "#/$defs/a", [], ("#/$defs/a",))
    with pytest.raises(InvalidConstraintError, match="refers to itself"):
        converter.flatten(target, "#/$defs/a", [], ())


def test_the_same_object_twice_converts_as_two_copies() -> None:
    item = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}}
    shared = {"allOf": [item, {"properties": {"m": item}}], "properties": {"k": item}}
    copied = copy.deepcopy(shared)
    assert json_schema_to_regex(shared) == json_schema_to_regex(copied)
    assert json_schema_to_grammar(shared) == json_schema_to_grammar(copied)
    assert json_schema_path(shared, regex_budget=16_000) == json_schema_path(
        copied, regex_budget=16_000
    )


def test_errors_name_where_each_use_is() -> None:
    bad = {"type": "string", "minLength": 3, "maxLength": 1}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": bad}}
    with pytest.raises(InvalidConstraintError, match="#/properties/b"):
        json_schema_to_regex(schema)


def test_too_deep_at_writes_the_pointer_it_returns() -> None:
    document = {"a/b": {"c~d": [[{"x": 1}]]}, "k": 1}
    assert too_deep_at(document, 3) == "#/a~1b/c~0d/0/0"
    assert too_deep_at(document, 4) is None
    assert too_deep_at([{}, [[[]]]], 2) == "#/1/0/0"


def test_prune_keeps_what_completes() -> None:
    loop = {"type": "object", "properties": {"x": {"$ref": "#/$defs/n"}}, "required": ["x"]}
    schema = {"$defs": {"n": loop}, "anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}
    assert json_schema_to_grammar(schema) == 'start: r0\nr0: r6\nr6: T7\nT7: "null"\n'
    with pytest.raises(InvalidConstraintError, match="accepts no document"):
        json_schema_to_grammar({"$defs": {"n": loop}, "$ref": "#/$defs/n"})
