"""What each server's own JSON Schema engine enforces, keyword by keyword.

A server that receives a schema through its native field (``json_schema``, ``response_format``,
``structured_outputs.json``) enforces only the keywords its engine knows; the rest it drops,
usually without a word (llama.cpp's converter skips unknown keywords silently and bounds
``number`` values not at all). An adapter asks :func:`unenforced` which keyword uses of a schema
its server would drop, and then sends our own compiled form instead, or refuses before any
request goes out.

The facts come from each engine's documentation and source:

- llama.cpp (``common/json-schema-to-grammar.cpp``, ``grammars/README.md``): numeric bounds
  only for ``integer``; ``pattern`` only when anchored with ``^...$``; formats ``date``,
  ``time``, ``date-time``, ``uuid``; no ``uniqueItems``, ``contains``, ``not``, conditionals,
  ``patternProperties``, ``propertyNames``, ``min/maxProperties``, ``multipleOf``,
  ``dependent*``, ``unevaluated*``, ``$anchor``/``$dynamicRef``; ``prefixItems`` is broken.
  ``additionalProperties`` absent means *false* there: stricter than the specification, so
  never an invalid answer. ``oneOf`` is read as ``anyOf``: exact when the branches are
  disjoint (discriminated unions); overlaps are caught by the local check of answers.

- xgrammar (SGLang's default backend; vLLM's ``xgrammar`` backend), from vLLM's
  ``has_xgrammar_unsupported_json_features`` (the list of what xgrammar silently ignores) and
  xgrammar's ``json_schema_converter.cc``: no ``multipleOf``, ``uniqueItems``,
  ``contains``/``min/maxContains``, ``patternProperties``, ``propertyNames``,
  ``dependentSchemas``; formats only from its list; with ``pattern`` or ``format`` it drops
  ``minLength``/``maxLength``; conditionals and ``not`` are not enforced. vLLM's default
  ``auto`` backend sends such schemas to llguidance, which enforces or refuses them, but a
  server started with ``backend=xgrammar`` does not, so vLLM gets the xgrammar table too.

The tables list the keywords that constrain documents; annotations (``title``,
``description``, ``default``, ``examples``, ``$comment``...) never count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from outlines_like.adapters._schema import _children

__all__ = [
    "LLAMACPP_JSON_SCHEMA",
    "XGRAMMAR_JSON_SCHEMA",
    "KeywordUse",
    "Support",
    "keyword_uses",
    "unenforced",
]

# Keywords that describe but never constrain a document.
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
        "discriminator",
        "$defs",
        "definitions",
        "$vocabulary",
        "nullable",
    }
)


@dataclasses.dataclass(frozen=True)
class KeywordUse:
    """One constraining keyword in a schema.

    Attributes:
        pointer: JSON pointer to the keyword (``#/properties/score/minimum``).
        keyword: The keyword (``minimum``).
        value: Its value in the schema.
        types: The ``type`` declared beside it (``("integer",)``), empty when none.
        siblings: The other keywords of the same subschema.
    """

    pointer: str
    keyword: str
    value: Any
    types: tuple[str, ...]
    siblings: frozenset[str] = frozenset()


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def _walk(node: Any, pointer: str) -> Iterator[KeywordUse]:
    if not isinstance(node, Mapping):
        return
    declared = node.get("type")
    types = (
        (declared,)
        if isinstance(declared, str)
        else tuple(t for t in declared if isinstance(t, str))
        if isinstance(declared, list)
        else ()
    )
    for keyword, value in node.items():
        if keyword in ANNOTATIONS or keyword.startswith("x-"):
            continue
        yield KeywordUse(f"{pointer}/{_escape(keyword)}", keyword, value, types, frozenset(node))
    for path, sub in _children(dict(node)):
        head, _, name = path.partition("/")
        child = f"{pointer}/{head}" + (f"/{_escape(name)}" if name else "")
        yield from _walk(sub, child)


def keyword_uses(schema: Mapping[str, Any]) -> list[KeywordUse]:
    """Every constraining keyword in ``schema``, definitions included, in document order."""
    return list(_walk(schema, "#"))


Support = Callable[[KeywordUse], bool]


def _always(use: KeywordUse) -> bool:
    return True


def _integer_only(use: KeywordUse) -> bool:
    return use.types == ("integer",)


def _anchored(use: KeywordUse) -> bool:
    return isinstance(use.value, str) and use.value.startswith("^") and use.value.endswith("$")


@dataclasses.dataclass(frozen=True)
class _Formats:
    """``format`` is enforced for these names only."""

    names: frozenset[str]

    def __call__(self, use: KeywordUse) -> bool:
        return use.value in self.names


def _formats(*names: str) -> Support:
    return _Formats(frozenset(names))


LLAMACPP_JSON_SCHEMA: dict[str, Support] = {
    "type": _always,
    "properties": _always,
    "required": _always,
    "additionalProperties": _always,
    "items": _always,
    "minItems": _always,
    "maxItems": _always,
    "enum": _always,
    "const": _always,
    "anyOf": _always,
    "oneOf": _always,
    "allOf": _always,
    "$ref": _always,
    "minLength": _always,
    "maxLength": _always,
    "pattern": _anchored,
    "format": _formats("date", "time", "date-time", "uuid"),
    "minimum": _integer_only,
    "maximum": _integer_only,
    "exclusiveMinimum": _integer_only,
    "exclusiveMaximum": _integer_only,
}
"""llama.cpp's server: keyword -> whether a given use of it is enforced."""


def _length_without_pattern(use: KeywordUse) -> bool:
    return not ({"pattern", "format"} & use.siblings)


XGRAMMAR_JSON_SCHEMA: dict[str, Support] = {
    **{k: _always for k in ("type", "properties", "required", "additionalProperties", "items")},
    **{k: _always for k in ("prefixItems", "minItems", "maxItems", "enum", "const", "anyOf")},
    **{k: _always for k in ("oneOf", "allOf", "$ref", "pattern", "minProperties")},
    **{k: _always for k in ("maxProperties", "minimum", "maximum")},
    **{k: _always for k in ("exclusiveMinimum", "exclusiveMaximum")},
    "minLength": _length_without_pattern,
    "maxLength": _length_without_pattern,
    "format": _formats(
        "email",
        "date",
        "time",
        "date-time",
        "duration",
        "ipv4",
        "ipv6",
        "hostname",
        "uuid",
        "uri",
        "uri-reference",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
    ),
}
"""xgrammar (SGLang, vLLM): keyword -> whether a given use of it is enforced."""


def unenforced(table: Mapping[str, Support], schema: Mapping[str, Any]) -> list[KeywordUse]:
    """The keyword uses of ``schema`` that an engine with ``table`` would not enforce."""
    return [
        use
        for use in keyword_uses(schema)
        if not (support := table.get(use.keyword)) or not support(use)
    ]


# Support rules with a condition, as the docs page states them.
_CONDITIONS: dict[Support, str] = {
    _integer_only: "for `integer` only",
    _anchored: "when anchored `^...$`",
    _length_without_pattern: "unless beside `pattern`/`format`",
}

# Keywords no table enforces, listed so the page shows them too.
_OTHERS = (
    "multipleOf",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "patternProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedProperties",
    "unevaluatedItems",
)


def _cell(table: Mapping[str, Support], keyword: str) -> str:
    support = table.get(keyword)
    if support is None:
        return "dropped"
    if support is _always:
        return "yes"
    if support in _CONDITIONS:
        return _CONDITIONS[support]
    if isinstance(support, _Formats):
        return "formats: " + ", ".join(f"`{k}`" for k in sorted(support.names))
    raise ValueError(f"no docs wording for the rule {support!r}")


def markdown() -> str:
    """The "what each server enforces" table, as docs/servers/enforcement.md shows it."""
    keywords = list(dict.fromkeys([*LLAMACPP_JSON_SCHEMA, *XGRAMMAR_JSON_SCHEMA, *_OTHERS]))
    lines = [
        "| keyword | llama.cpp, Ollama | SGLang, vLLM (xgrammar) |",
        "|---|---|---|",
    ]
    for keyword in keywords:
        lines.append(
            f"| `{keyword}` | {_cell(LLAMACPP_JSON_SCHEMA, keyword)} "
            f"| {_cell(XGRAMMAR_JSON_SCHEMA, keyword)} |"
        )
    return "\n".join(lines) + "\n"
