"""The checks' fast paths give ``jsonschema``'s verdicts.

The flat draft 2020-12 metaschema (``jsonschema``'s fast path for a declared 2020-12 schema)
and :func:`surely_valid` (no ``jsonschema`` at all) must never pass a schema the official
metaschema refuses; :func:`quick_value_check` (values beside an ``enum``) agrees with
``jsonschema`` on every value.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from outlines_like.errors import InvalidConstraintError
from outlines_like.types.json_schema._base import CLOSED, EXTRA_PATTERNS
from outlines_like.types.json_schema._driver import _check_against_metaschema, _Converter
from outlines_like.types.json_schema._logic import NOT_STRINGS
from outlines_like.types.json_schema._quick import (
    _VALIDATING,
    DRAFT_7_IDS,
    DRAFT_2020_12_IDS,
    UnknownValue,
    metaschema,
    quick_value_check,
    surely_valid,
)
from outlines_like.types.json_schema_budget import _passes_quickly, bounded_json_schema_regex

SUITE = Path(__file__).parents[1] / "data" / "json-schema-test-suite" / "draft2020-12"
OFFICIAL = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)
FLAT = jsonschema.Draft202012Validator(metaschema("draft2020-12"))


def _flat_metaschema_2020_12() -> dict[str, Any]:
    """Draft 2020-12's metaschema as one document, with the meaning of the official one.

    The official metaschema is an ``allOf`` of seven vocabulary metaschemas, each recursing
    through ``{"$dynamicRef": "#meta"}``; for the metaschema itself that dynamic reference
    resolves to the root. Their ``properties`` and ``$defs`` do not overlap, so merging them
    into one object with ``{"$ref": "#"}`` for the recursion (and references into a
    vocabulary's ``$defs`` pointing into the merged ones) checks the same keywords.
    """
    from jsonschema_specifications import REGISTRY

    specs = jsonschema.Draft202012Validator.META_SCHEMA
    base = specs["$id"].rsplit("/", 1)[0] + "/"
    flat: dict[str, Any] = {"type": ["object", "boolean"], "properties": {}, "$defs": {}}
    for part in [specs, *(REGISTRY.contents(base + ref["$ref"]) for ref in specs["allOf"])]:
        for key in ("properties", "$defs"):
            overlap = flat[key].keys() & part.get(key, {}).keys()
            assert not overlap, f"metaschema vocabularies overlap on {sorted(overlap)}"
            flat[key].update(part.get(key, {}))

    def static(node: Any) -> Any:
        if isinstance(node, dict):
            if node.get("$dynamicRef") == "#meta":
                node = {**{k: v for k, v in node.items() if k != "$dynamicRef"}, "$ref": "#"}
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("meta/") and "#" in ref:
                node = {**node, "$ref": "#" + ref.split("#", 1)[1]}  # into the merged $defs
            return {k: static(v) for k, v in node.items()}
        if isinstance(node, list):
            return [static(v) for v in node]
        return node

    return static(flat)  # type: ignore[no-any-return]


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


def test_the_vendored_metaschemas_are_jsonschemas() -> None:
    assert metaschema("draft2020-12") == _flat_metaschema_2020_12()
    assert metaschema("draft-07") == jsonschema.Draft7Validator.META_SCHEMA


def test_the_declared_drafts_are_those_jsonschema_reads() -> None:
    for ids, cls in (
        (DRAFT_2020_12_IDS, jsonschema.Draft202012Validator),
        (DRAFT_7_IDS, jsonschema.Draft7Validator),
    ):
        for uri in ids:
            assert jsonschema.validators.validator_for({"$schema": uri}) is cls


def test_draft_7_refs_have_no_validating_siblings() -> None:
    # draft 7 ignores a $ref's siblings; the fast check applies them: they must not validate
    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                assert set(node) <= {"$ref", "default", "$comment"}, node
            for key, value in node.items():
                for sub in value.values() if key in ("properties", "definitions") else [value]:
                    walk(sub)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(metaschema("draft-07"))


def _official(schema: dict[str, Any]) -> bool:
    """``jsonschema``'s verdict, as ``_check_against_metaschema`` asks it."""
    declared = jsonschema.validators.validator_for(schema, default=None)
    drafts = (
        [declared]
        if declared is not None
        else [jsonschema.Draft202012Validator, jsonschema.Draft7Validator]
    )
    return any(cls(cls.META_SCHEMA).is_valid(schema) for cls in drafts)


_ODD_VALUES: list[Any] = [
    -1, 0, 2, 1.5, 2.0, "x", "", "#/a#b", "not an anchor", [], ["a", "a"], ["a", "b"], [1], {},
    True, False, None, {"type": "nope"}, ["string", "string"], ["string", "integer"],
    {"a": {"type": 3}}, {"$ref": 5}, [{"minimum": "0"}], {"minLength": -1},
]  # fmt: skip


def _mutations(schema: Any, rng: random.Random, n: int) -> list[Any]:
    """``n`` copies of ``schema``, each with one value (or member name) replaced at random."""
    out = []
    for _ in range(n):
        copy = json.loads(json.dumps(schema))
        parents: list[tuple[Any, Any]] = []
        todo = [copy]
        while todo:
            node = todo.pop()
            keys = list(node) if isinstance(node, dict) else range(len(node))
            for k in keys:
                parents.append((node, k))
                if isinstance(node[k], (dict, list)):
                    todo.append(node[k])
        if not parents:
            continue
        node, k = rng.choice(parents)
        if isinstance(node, dict) and rng.random() < 0.3:
            node[rng.choice(["type", "items", "required", "$anchor", "$id", "minItems"])] = (
                node.pop(k)
            )
        else:
            node[k] = json.loads(json.dumps(rng.choice(_ODD_VALUES)))
        out.append(copy)
    return out


def test_surely_valid_passes_only_what_jsonschema_passes() -> None:
    known = {None, *DRAFT_7_IDS, *DRAFT_2020_12_IDS}
    rng = random.Random(0)
    schemas = [s for s in _suite_schemas() + BROKEN if isinstance(s, dict)]
    schemas += [{"$schema": sorted(DRAFT_2020_12_IDS)[0], **s} for s in BROKEN]
    schemas += [{"$schema": sorted(DRAFT_7_IDS)[1], **s} for s in BROKEN]
    schemas += [{"items": [{"type": "string"}]}, {"$schema": "http://example.com/x", "type": 1}]
    checked = agreed = 0
    for schema in schemas:
        for case in [schema, *_mutations(schema, rng, 4)]:
            if not isinstance(case, dict) or not isinstance(case.get("$schema", ""), str):
                continue  # (jsonschema raises TypeError on a $schema that is not a string)
            fast, official = surely_valid(case), _official(case)
            assert official or not fast, case
            if case.get("$schema") in known:
                checked += 1  # (another $schema goes to jsonschema)
                agreed += fast == official
    assert checked > 1500
    assert agreed > 0.99 * checked  # it falls back to jsonschema rarely


@pytest.mark.parametrize(
    "schema",
    [
        {"minLength": Decimal(1)},
        {"enum": (1, 2)},
        {1: {"type": "string"}},
        {"required": ["a", 1]},
        {"type": ["string", 1]},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "string"},
    ],
)
def test_what_the_fast_check_does_not_read_goes_to_jsonschema(schema: Any) -> None:
    assert not surely_valid(schema)


def test_an_invalid_schema_is_named_whichever_check_runs() -> None:
    with pytest.raises(InvalidConstraintError, match=r"invalid JSON Schema at #/minLength"):
        _check_against_metaschema({"minLength": -1})


def test_compiling_a_schema_does_not_import_jsonschema() -> None:
    code = (
        "import sys\n"
        "from outlines_like.types.json_schema_grammar import json_schema_path\n"
        "schema = {'type': 'object', 'properties': {'a': {'type': 'string'}}, "
        "'$schema': 'https://json-schema.org/draft/2020-12/schema'}\n"
        "json_schema_path(schema, regex_budget=16_000)\n"
        "json_schema_path({'items': [{'type': 'string'}]}, regex_budget=16_000)\n"
        "assert 'jsonschema' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


_VALUES: list[Any] = [
    0, 1, -3, 1.0, 2.5, -0.5, 10**20, True, False, None, "", "a", "abc", "ünï", "0", [], [1],
    {}, {"a": 1},
]  # fmt: skip
_RESTS: list[dict[str, Any]] = [
    {"type": "string"},
    {"type": ["integer", "null"], "description": "d"},
    {"type": "number", "minimum": 0, "exclusiveMaximum": 10**19},
    {"type": "integer", "maximum": 1.5, "title": "t"},
    {"minLength": 1, "maxLength": 3},
    {"exclusiveMinimum": -1, "maximum": 1},
    {"type": "boolean"},
    {"type": ["object", "array"]},
    {"minimum": 0.0},
    {"default": 3},
    {"type": "string", "markdownDescription": "m", "x-intellij-enum-metadata": {}},
    {"type": ["string", "integer"], NOT_STRINGS: ["a", "0"], CLOSED: True, "enumDescriptions": []},
    {"then": {"type": "integer"}, "else": {"maximum": -10}},
    {"pattern": "^a", "ignoreCase": True, "doNotSuggest": True},
    {"type": "string", "pattern": "b|\\d$", "maxLength": 2},
]


@pytest.mark.parametrize("rest", _RESTS)
@pytest.mark.parametrize("declared", [None, *sorted(DRAFT_2020_12_IDS), *sorted(DRAFT_7_IDS)])
def test_quick_value_check_agrees_with_jsonschema(rest: dict[str, Any], declared: Any) -> None:
    root = {} if declared is None else {"$schema": declared}
    quick = quick_value_check(rest, root)
    assert quick is not None
    converter = _Converter(
        root, whitespace_pattern=None, lenient=False, max_recursion_depth=3, max_any_depth=2
    )
    official = converter.slow_validator(rest)
    for value in _VALUES:
        assert quick(value) == official(value), (rest, value)


def test_quick_value_check_knows_every_keyword_jsonschema_reads() -> None:
    read = {*jsonschema.Draft202012Validator.VALIDATORS, *jsonschema.Draft7Validator.VALIDATORS}
    assert read == _VALIDATING


@pytest.mark.parametrize(
    ("rest", "root"),
    [
        ({"type": "string", "format": "date"}, {}),
        ({"type": "string", "pattern": "a("}, {}),
        ({"pattern": 3}, {}),
        ({"type": "string", EXTRA_PATTERNS: ["a"]}, {}),
        ({NOT_STRINGS: ["a", 1]}, {}),
        ({"allOf": [{"type": "string"}]}, {}),
        ({"$ref": "#/$defs/a"}, {}),
        ({"minLength": 1.0}, {}),
        ({"minimum": True}, {}),
        ({"type": "strnig"}, {}),
        ({"type": "integer"}, {"$schema": "http://json-schema.org/draft-04/schema#"}),
    ],
)
def test_quick_value_check_leaves_the_rest_to_jsonschema(
    rest: dict[str, Any], root: dict[str, Any]
) -> None:
    assert quick_value_check(rest, root) is None


def test_quick_value_check_refuses_values_that_are_not_json() -> None:
    quick = quick_value_check({"type": "string"}, {})
    assert quick is not None
    with pytest.raises(UnknownValue):
        quick(Decimal(1))


def test_an_enum_beside_simple_keywords_is_filtered_without_jsonschema() -> None:
    code = (
        "import sys\n"
        "from outlines_like.types.json_schema import json_schema_to_regex\n"
        "r = json_schema_to_regex({'type': 'string', 'enum': ['a', 'bb', 1], 'maxLength': 1})\n"
        "assert r == '\"a\"', r\n"
        "assert 'jsonschema' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
