"""The keywords and formats enforced beyond the basics: what the masker lets through is valid.

For each schema: strings drawn from its regex (hypothesis) are documents ``jsonschema`` accepts
(through the answer check of ``types/verify.py``, so the masker and the check agree), the
valid documents listed are accepted by both the regex and the grammar path, and the invalid
ones by neither.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlines_like.errors import InvalidConstraintError
from outlines_like.fsm.grammar import CompiledGrammar, compile_grammar
from outlines_like.fsm.vocabulary import Vocabulary
from outlines_like.types import CFG, JsonSchema
from outlines_like.types.json_schema import json_schema_to_regex
from outlines_like.types.json_schema._driver import number_literal
from outlines_like.types.json_schema_grammar import json_schema_to_grammar
from outlines_like.types.predefined import FORMAT_PATTERNS
from outlines_like.types.verify import violation

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
BYTES = Vocabulary([bytes([b]) for b in range(256)] + [b"<eos>"], eos_token_ids=[256])

OBJ = {"type": "object"}

# (name, schema, valid documents as written, invalid documents)
CASES: list[tuple[str, dict[str, Any], list[str], list[str]]] = [
    (
        "not type",
        {"not": {"type": ["string", "object"]}},
        ["1", "null", "[]", "true"],
        ['"a"', "{}"],
    ),
    (
        "not enum of strings",
        {"type": "string", "not": {"enum": ["draft", "deleted"]}},
        ['"final"', '"drafts"', '"draf"', '""'],
        ['"draft"', '"deleted"'],
    ),
    (
        "if then else on a discriminator",
        {
            **OBJ,
            "properties": {
                "kind": {"enum": ["card", "bank"]},
                "number": {"type": "string", "maxLength": 4},
                "iban": {"type": "string", "maxLength": 4},
            },
            "required": ["kind"],
            "if": {"properties": {"kind": {"const": "card"}}},
            "then": {"required": ["number"]},
            "else": {"required": ["iban"]},
            "additionalProperties": False,
        },
        ['{"kind":"card","number":"1"}', '{"kind":"bank","iban":"DE"}'],
        ['{"kind":"card","iban":"DE"}', '{"kind":"bank"}', '{"kind":"card"}'],
    ),
    (
        "dependentRequired",
        {
            **OBJ,
            "properties": {"card": {"type": "integer"}, "cvv": {"type": "integer"}},
            "dependentRequired": {"card": ["cvv"]},
        },
        ["{}", '{"cvv":1}', '{"card":1,"cvv":2}'],
        ['{"card":1}', '{"card":1,"x":2}'],
    ),
    (
        "dependentSchemas",
        {
            **OBJ,
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "dependentSchemas": {"a": {"properties": {"b": {"minimum": 5}}, "required": ["b"]}},
            "additionalProperties": False,
        },
        ["{}", '{"b":1}', '{"a":0,"b":5}'],
        ['{"a":0}', '{"a":0,"b":4}'],
    ),
    (
        "uniqueItems of an enum",
        {"type": "array", "items": {"enum": ["r", "g", "b"]}, "uniqueItems": True},
        ["[]", '["r"]', '["b","r"]', '["g","b","r"]'],
        ['["r","r"]', '["g","b","g"]', '["x"]'],
    ),
    (
        "contains with minContains",
        {
            "type": "array",
            "items": {"type": "integer"},
            "contains": {"minimum": 10},
            "minContains": 2,
        },
        ["[10,11]", "[1,10,2,30,3]"],
        ["[]", "[10]", "[1,2,3]", '[10,"a",11]'],
    ),
    (
        "patternProperties",
        {
            **OBJ,
            "properties": {"name": {"type": "string"}},
            "patternProperties": {"^x-": {"type": "integer"}},
            "additionalProperties": False,
        },
        ['{"name":"a"}', '{"name":"a","x-b":1,"x-":2}', '{"x-c":3}'],
        ['{"name":"a","x-b":"s"}', '{"name":"a","y":1}'],
    ),
    (
        "propertyNames and member counts of a map",
        {
            **OBJ,
            "additionalProperties": {"type": "integer"},
            "propertyNames": {"pattern": "^[a-z]{1,3}$"},
            "minProperties": 1,
            "maxProperties": 2,
        },
        ['{"ab":1}', '{"a":1,"b":2}'],
        ["{}", '{"a":1,"b":2,"c":3}', '{"A":1}', '{"abcd":1}'],
    ),
    (
        "minProperties 1 on declared members",
        {**OBJ, "properties": {"a": {}, "b": {}}, "minProperties": 1},
        ['{"a":1}', '{"b":[]}'],
        ["{}"],
    ),
    (
        "integer multipleOf, unbounded",
        {"type": "integer", "multipleOf": 25},
        ["0", "25", "-50", "1075", "1000000"],
        ["5", "-30", "1010"],
    ),
    (
        "integer multipleOf, bounded",
        {"type": "integer", "multipleOf": 7, "minimum": -10, "maximum": 30},
        ["-7", "0", "28"],
        ["-14", "35", "8"],
    ),
    (
        "number multipleOf 0.01",
        {"type": "number", "multipleOf": 0.01},
        ["0.07", "-12.5", "3", "0.1"],
        ["0.001", "-0.125"],
    ),
    (
        "const numbers compare as JSON does",
        {"type": "object", "properties": {"v": {"const": 2.0}, "w": {"enum": [0, 1.5]}}},
        ['{"v":2}', '{"v":2.0}', '{"v":2.00,"w":-0.0}', '{"w":1.50}'],
        ['{"v":2.5}', '{"w":1.05}', '{"v":-2}'],
    ),
    (
        "format without type constrains strings only",
        {"format": "date"},
        ['"2024-02-29"', "12", "null", "{}"],
        ['"2023-02-29"', '"2024-04-31"', '"x"'],
    ),
    (
        "oneOf told apart by required members",
        {
            "oneOf": [
                {**OBJ, "properties": {"id": {"type": "integer"}}, "required": ["id"]},
                {**OBJ, "properties": {"name": {"type": "string"}}, "required": ["name"]},
            ]
        },
        ['{"id":1}', '{"name":"a"}'],
        ['{"id":1,"name":"a"}', "{}"],
    ),
    (
        "oneOf of types: the types one branch names (Kubernetes' Quantity)",
        {"oneOf": [{"type": ["string", "null"]}, {"type": ["number", "null"]}]},
        ['"1Gi"', "1.5", "2", "-0"],
        ["null", "true", "{}", "[]"],
    ),
    (
        "oneOf of types through $ref, with keywords beside it",
        {
            "$defs": {"s": {"type": "string", "title": "a string"}, "n": {"type": "null"}},
            "type": ["string", "integer", "null"],
            "maxLength": 2,
            "oneOf": [{"$ref": "#/$defs/s"}, {"type": ["integer", "null"]}, {"$ref": "#/$defs/n"}],
        },
        ['"ab"', "7", '""'],
        ["null", '"abc"', "1.5", "true"],
    ),
    (
        "$anchor",
        {
            "$defs": {"pos": {"$anchor": "positive", "type": "integer", "minimum": 1}},
            "type": "array",
            "items": {"$ref": "#positive"},
        },
        ["[]", "[1,2]"],
        ["[0]", '["a"]'],
    ),
]


@functools.cache
def _grammar(schema_json: str) -> CompiledGrammar:
    return compile_grammar(CFG(json_schema_to_grammar(json.loads(schema_json)), "lark"), BYTES)


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_valid_documents_are_reachable_and_invalid_ones_refused(
    schema: dict[str, Any], valid: list[str], invalid: list[str]
) -> None:
    regex = re.compile(json_schema_to_regex(schema))
    grammar = _grammar(json.dumps(schema))
    validator_class = jsonschema.validators.validator_for(schema)
    check = validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)
    for text in valid:
        assert violation(JsonSchema(schema), text) is None, text  # the test's own premise
        assert regex.fullmatch(text), text
        assert grammar.accepts_text(text.encode()), text
    for text in invalid:
        try:
            bad = not check.is_valid(json.loads(text))
        except json.JSONDecodeError:
            bad = True
        assert bad, text
        assert not regex.fullmatch(text), text
        assert not grammar.accepts_text(text.encode()), text


@pytest.mark.parametrize("schema", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_what_the_regex_writes_is_valid(schema: dict[str, Any]) -> None:
    """Soundness: strings drawn from the regex pass the answer check (jsonschema + formats)."""
    regex = json_schema_to_regex(schema, max_any_depth=1)
    term = JsonSchema(schema)

    @SETTINGS
    @given(text=st.from_regex(regex, fullmatch=True))
    def check(text: str) -> None:
        assert violation(term, text) is None, text

    check()


@pytest.mark.parametrize(
    ("schema", "keyword"),
    [
        ({"not": {"pattern": "^a"}}, "not"),
        ({"type": "integer", "not": {"type": "integer"}}, "not"),
        ({**OBJ, "if": {"required": ["a"], "pattern": "x"}, "then": {}}, "if"),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems"),
        ({"type": "array", "contains": {"type": "integer"}, "maxContains": 2}, "maxContains"),
        ({"type": "array", "contains": {}, "maxItems": 3}, "contains"),
        ({**OBJ, "properties": {"a": {}, "b": {}, "c": {}}, "minProperties": 2}, "minProperties"),
        ({**OBJ, "properties": {"a": {}, "b": {}}, "maxProperties": 1}, "maxProperties"),
        ({"type": "integer", "multipleOf": 3, "minimum": 0}, "multipleOf"),
        ({"type": "number", "multipleOf": 0.3}, "multipleOf"),
        ({"allOf": [{"contains": {"const": 1}}, {"contains": {"const": 2}}]}, "contains"),
        (
            {"allOf": [{"patternProperties": {"^a": {}}}, {"properties": {"b": {}}}]},
            "patternProperties",
        ),
    ],
)
def test_what_cannot_be_enforced_is_refused_by_name(schema: dict[str, Any], keyword: str) -> None:
    with pytest.raises(InvalidConstraintError, match=re.escape(repr(keyword))):
        json_schema_to_regex(schema)


# ---------------------------------------------------------------------------- formats


def test_date_is_exact_over_four_centuries() -> None:
    pattern = re.compile(FORMAT_PATTERNS["date"])
    for year in [1, 4, 100, 400, 1900, 1999, 2000, 2023, 2024, 2100, 2400, 9999]:
        for month in range(1, 13):
            for day in range(1, 32):
                text = f"{year:04d}-{month:02d}-{day:02d}"
                try:
                    datetime.date(year, month, day)
                    real = True
                except ValueError:
                    real = False
                assert bool(pattern.fullmatch(text)) == real, text
    assert not pattern.fullmatch("0000-01-01")


# formats whose checker jsonschema ships (with the packages the core installs) or verify adds
CHECKED_FORMATS = sorted(FORMAT_PATTERNS)


@pytest.mark.parametrize("fmt", CHECKED_FORMATS)
def test_format_strings_pass_the_format_checker(fmt: str) -> None:
    term = JsonSchema({"type": "string", "format": fmt})

    @SETTINGS
    @given(text=st.from_regex(FORMAT_PATTERNS[fmt], fullmatch=True))
    def check(text: str) -> None:
        assert violation(term, json.dumps(text)) is None, text

    check()


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("time", ["08:30:06Z", "23:59:60z", "12:00:00.5+05:30"], ["12:00:00", "24:00:00Z"]),
        ("date-time", ["2024-02-29t00:00:00Z"], ["2023-02-29T00:00:00Z", "2024-01-01T00:00:00"]),
        ("uri", ["urn:a:b", "http://[::1]:80/p?q#f"], ["/a", "http://x/%G0", "http://x:ab/"]),
        ("uri-reference", ["", "../a", "?q", "//h/p"], ["1:b", "/a b", "/%zz"]),
        ("hostname", ["a.b-c.io", "h0"], ["-a.com", "a..b", "a_b", "xn--x", "a" * 64]),
        ("duration", ["P1Y2M3DT4H5M6S", "PT0S", "P2W"], ["P", "PT", "P1Y2D", "P1W1D"]),
        ("email", ["a.b@c.io", "x@[127.0.0.1]"], ["a..b@c.io", ".a@c.io", "a@b@c"]),
        ("ipv6", ["::ffff:1.2.3.4", "1::"], ["1::2::3", "::1.2.3.04"]),
        (
            "byte",
            ["", "QQ==", "QUI=", "QUJD", "aGk/+w==", "AAAA" * 20],
            ["Q", "QQ=", "Q===", "QUJD=", "QQ==QQ==", "a-_b", "QU JD", "QUJD\n", "QQ"],
        ),
    ],
)
def test_formats_accept_and_refuse(fmt: str, good: list[str], bad: list[str]) -> None:
    pattern = re.compile(FORMAT_PATTERNS[fmt])
    for text in good:
        assert pattern.fullmatch(text), text
    for text in bad:
        assert not pattern.fullmatch(text), text


def _strict_base64(text: str) -> bool:
    """RFC 4648 base64 by Python's decoder: whole 4-character groups, ``=`` only at the end."""
    import base64
    import binascii

    body = text.rstrip("=")
    if len(text) % 4 or len(text) - len(body) > 2 or "=" in body:
        return False
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.text(alphabet="QUJDaz09+/=-_ \né", max_size=13))
def test_format_byte_is_what_the_base64_decoder_takes(text: str) -> None:
    assert bool(re.fullmatch(FORMAT_PATTERNS["byte"], text)) == _strict_base64(text), text


# -------------------------------------------------------------------- number literals


@SETTINGS
@given(
    value=st.one_of(
        st.integers(-(10**20), 10**20), st.floats(allow_nan=False, allow_infinity=False)
    ),
    zeros=st.integers(0, 3),
)
def test_number_literals_match_every_equal_plain_spelling(value: float, zeros: int) -> None:
    pattern = re.compile(number_literal(value))
    text = json.dumps(value)
    assert pattern.fullmatch(text), text
    if "e" not in text and "." in text:
        assert pattern.fullmatch(text + "0" * zeros)
    if isinstance(value, int) or value.is_integer():
        assert pattern.fullmatch(str(int(value)) + ".0" + "0" * zeros)

    @given(other=st.from_regex(pattern, fullmatch=True))
    @settings(max_examples=10, deadline=None, database=None)
    def spelled(other: str) -> None:
        assert json.loads(other) == value

    spelled()


_TYPE_SETS = [
    "null",
    ["string", "null"],
    ["number", "null"],
    ["integer", "null"],
    ["integer", "string"],
    ["boolean", "object", "array"],
    ["number"],
    ["array"],
]
# (2.0 is an integer too, written as 2 by the regex's integers: a policy tested elsewhere)
_VALUES = [None, True, False, 0, 2, -3, 1.5, "", "x", [], [1], {}, {"a": 1}]


@pytest.mark.parametrize("first", _TYPE_SETS, ids=str)
def test_one_of_types_is_exact(first: Any) -> None:
    """Every pair and triple of type-only branches: a value passes iff ``jsonschema`` says so.

    Where one branch names ``integer`` and another ``number`` the oneOf stays refused.
    """
    for second in _TYPE_SETS:
        for third in (None, *_TYPE_SETS[:4]):
            branches = [{"type": first}, {"type": second}]
            if third is not None:
                branches.append({"type": third})
            schema = {"oneOf": branches}
            names = [{t} if isinstance(t, str) else set(t) for t in (first, second, third) if t]
            kinds = [n - {"integer"} if "number" in n else n for n in names]
            mixed = any("integer" in a for a in kinds) and any("number" in b for b in kinds)
            nothing = not any(
                jsonschema.Draft202012Validator(schema).is_valid(v) for v in [*_VALUES, 2.5]
            )
            if mixed or nothing:
                with pytest.raises(InvalidConstraintError, match="oneOf" if mixed else "no doc"):
                    json_schema_to_regex(schema)
                continue
            regex = json_schema_to_regex(schema)
            for value in _VALUES:
                text = json.dumps(value, separators=(",", ":"))
                valid = jsonschema.Draft202012Validator(schema).is_valid(value)
                assert bool(re.fullmatch(regex, text)) == valid, (schema, text)
