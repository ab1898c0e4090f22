"""Checks without ``jsonschema`` on the common paths: a schema's metaschema, values beside ``enum``.

``jsonschema`` checks a schema against its metaschema exactly, but importing it costs ~100 ms
(paid by the first compile of a process) and its validator walks a large schema in tens of
milliseconds. The two metaschemas nearly every schema uses, draft 2020-12 (as one flat document:
its seven vocabularies merged, the ``$dynamicRef`` recursion made a ``$ref``) and draft 7, are
kept in ``metaschemas.json`` (a test checks them against ``jsonschema``'s). They use only a
dozen keywords, so :func:`surely_valid` compiles each once into closures and checks a schema in
one walk. It answers ``True`` only when the schema is valid under a metaschema the full check
would accept; anything it does not read exactly (another draft, a Python value that is not
JSON, a keyword of the metaschema it does not know) answers ``False``, and the caller asks
``jsonschema``, which also says where a schema fails.

:func:`quick_value_check` is the same idea for the values of an ``enum`` filtered by the
keywords beside it (``{"type": "string", "enum": [...]}``, the most common case): ``type``,
length, range and ``pattern`` keywords are read here, anything else goes to ``jsonschema``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from outlines_like.types.json_schema._base import EXTRA_FORMATS, EXTRA_PATTERNS, TYPES
from outlines_like.types.json_schema._logic import NOT_STRINGS

__all__ = [
    "DRAFT_7_IDS",
    "DRAFT_2020_12_IDS",
    "UnknownValue",
    "metaschema",
    "quick_value_check",
    "surely_valid",
]

DRAFT_2020_12_IDS = frozenset(
    {
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/schema#",
    }
)
"""The ``$schema`` spellings ``jsonschema`` reads as draft 2020-12."""

DRAFT_7_IDS = frozenset(
    {"http://json-schema.org/draft-07/schema", "http://json-schema.org/draft-07/schema#"}
)
"""The ``$schema`` spellings ``jsonschema`` reads as draft 7."""

_ANNOTATIONS = frozenset(
    {"$comment", "$id", "$schema", "default", "deprecated", "format", "title", "$defs"}
)
"""Keywords of the metaschemas that do not validate (``format`` is not asserted there)."""

Check = Callable[[Any], bool]


class UnknownValue(Exception):
    """A value the fast path does not read exactly: leave the verdict to ``jsonschema``."""


@functools.cache
def metaschema(draft: str) -> dict[str, Any]:
    """The metaschema of ``draft`` (``"draft2020-12"``, flat, or ``"draft-07"``)."""
    documents = json.loads(Path(__file__).with_name("metaschemas.json").read_text())
    return documents[draft]  # type: ignore[no-any-return]


def surely_valid(schema: dict[str, Any]) -> bool:
    """Whether ``schema`` is valid under its metaschema, when that is quick to tell for sure.

    Without ``$schema`` a schema valid under draft 2020-12 or draft 7 passes (the full check
    accepts 2020-12, 7 or 4); a declared draft 2020-12 or 7 is checked against that one.

    Returns:
        ``True`` when the schema is valid; ``False`` when it is not, or when it is not
        known here (another draft, values that are not JSON): ask ``jsonschema`` then.
    """
    declared = schema.get("$schema")
    if "$schema" not in schema:
        drafts: tuple[str, ...] = ("draft2020-12", "draft-07")
    elif isinstance(declared, str) and declared in DRAFT_2020_12_IDS:
        drafts = ("draft2020-12",)
    elif isinstance(declared, str) and declared in DRAFT_7_IDS:
        drafts = ("draft-07",)
    else:
        return False
    for draft in drafts:
        try:
            if _checker(draft)(schema):
                return True
        except (UnknownValue, RecursionError):
            return False
    return False


@functools.cache
def _checker(draft: str) -> Check:
    return _Compiler(metaschema(draft)).root


_FAILS: dict[str, Callable[[Any, Any], bool]] = {  # as jsonschema writes the failures
    "minLength": lambda v, bound: len(v) < bound,
    "maxLength": lambda v, bound: len(v) > bound,
    "minimum": lambda v, bound: v < bound,
    "maximum": lambda v, bound: v > bound,
    "exclusiveMinimum": lambda v, bound: v <= bound,
    "exclusiveMaximum": lambda v, bound: v >= bound,
}
_APPLIES = {"minLength": ("string",), "maxLength": ("string",)}  # the others: numbers
_VALIDATING = frozenset(
    {
        "$dynamicRef", "$ref", "additionalItems", "additionalProperties", "allOf", "anyOf",
        "const", "contains", "dependencies", "dependentRequired", "dependentSchemas", "enum",
        "exclusiveMaximum", "exclusiveMinimum", "format", "if", "items", "maxItems",
        "maxLength", "maxProperties", "maximum", "minItems", "minLength", "minProperties",
        "minimum", "multipleOf", "not", "oneOf", "pattern", "patternProperties",
        "prefixItems", "properties", "propertyNames", "required", "type", "unevaluatedItems",
        "unevaluatedProperties", "uniqueItems",
    }
)  # fmt: skip
"""The keywords ``jsonschema``'s draft 2020-12 and 7 validators read (it ignores the others)."""


def listed_values(branch: Any) -> list[Any] | None:
    """The values ``branch`` lists, when listing them is all it does (else ``None``).

    A dict with ``enum`` (or ``const``) and otherwise only keywords ``jsonschema`` ignores
    (annotations, vendor extensions): no ``$``-keyword, no marker of the converter's, nothing
    :data:`_VALIDATING` beside. With both ``enum`` and ``const``, the ``enum``'s values (the
    documents are among them).
    """
    if not isinstance(branch, dict):
        return None
    if "enum" in branch:
        values = branch["enum"]
    elif "const" in branch:
        values = [branch["const"]]
    else:
        return None
    if not isinstance(values, list):
        return None
    for key in branch:
        if key in ("enum", "const"):
            continue
        if not isinstance(key, str) or key in _VALIDATING or key.startswith(("$", "x-outlines")):
            return None
    return values


def quick_value_check(rest: dict[str, Any], root: dict[str, Any]) -> Check | None:
    """The check ``jsonschema`` makes of a value against ``rest``, when it is simple to make here.

    ``rest`` may hold ``type``, ``minLength``/``maxLength`` and the four range keywords (with
    plain numbers), ``pattern`` (``re.search``, as ``jsonschema`` does), the strings a value
    must not be (``NOT_STRINGS``), and any keyword ``jsonschema`` does not read (annotations,
    ``markdownDescription``, ``x-...``); ``root`` (whose ``$schema`` picks the draft) must be
    draft 2020-12 or 7, whose ``integer`` includes integral floats. The check raises
    :class:`UnknownValue` on a value that is not JSON.

    Returns:
        The check, or ``None`` when ``rest`` holds anything else (ask ``jsonschema``).
    """
    declared = root.get("$schema")
    if "$schema" in root and not (
        isinstance(declared, str) and declared in DRAFT_2020_12_IDS | DRAFT_7_IDS
    ):
        return None
    checks: list[Check] = []
    for key, bound in rest.items():
        if not isinstance(key, str) or key in (EXTRA_PATTERNS, EXTRA_FORMATS):
            return None
        if key == NOT_STRINGS:
            if not isinstance(bound, list) or not all(isinstance(v, str) for v in bound):
                return None
            checks.append(_not_strings_check(frozenset(bound)))
        elif key.startswith("x-outlines-like") or key not in _VALIDATING:
            continue  # markers the converter keeps for itself, and what jsonschema ignores
        elif key == "type":
            types = [bound] if isinstance(bound, str) else bound
            if not isinstance(types, list) or not all(t in TYPES for t in types):
                return None
            checks.append(_types_check(types))
        elif key in _FAILS and type(bound) in ((int,) if key in _APPLIES else (int, float)):
            checks.append(_bound_check(key, bound))
        elif key == "pattern" and isinstance(bound, str) and _searcher(bound) is not None:
            checks.append(_pattern_check(bound))
        else:
            return None
    if len(checks) == 1:
        return checks[0]
    return lambda value: all(check(value) for check in checks)


@functools.lru_cache(maxsize=1024)
def _searcher(pattern: str) -> Callable[[str], Any] | None:
    """``re.search`` of ``pattern``, as ``jsonschema`` applies it (``None``: not a Python regex)."""
    try:
        return re.compile(pattern).search
    except (re.error, RecursionError, OverflowError):
        return None


def _pattern_check(pattern: str) -> Check:
    search = _searcher(pattern)
    assert search is not None
    return lambda v: _json_type(v) != "string" or search(v) is not None


def _not_strings_check(excluded: frozenset[str]) -> Check:
    def check(value: Any) -> bool:
        _json_type(value)
        return not (isinstance(value, str) and value in excluded)

    return check


def _bound_check(key: str, bound: float) -> Check:
    fails, applies = _FAILS[key], _APPLIES.get(key, ("integer", "number"))
    return lambda v: _json_type(v) not in applies or not fails(v, bound)


# --------------------------------------------------------------------- the compiled checks


_TYPE_NAMES: dict[type, str] = {
    type(None): "null",
    bool: "boolean",
    str: "string",
    int: "integer",
    list: "array",
    dict: "object",
}


def _json_type(value: Any) -> str:
    """The JSON type of a Python value, as ``jsonschema`` reads it (integral floats included)."""
    name = _TYPE_NAMES.get(type(value))
    if name is not None:
        return name
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise UnknownValue(type(value).__name__)


def _types_check(types: Any) -> Check:
    allowed = frozenset([types] if isinstance(types, str) else types)
    if "number" in allowed:
        allowed |= {"integer"}
    # the exact Python types whose JSON type is their own (:data:`_TYPE_NAMES`), answered by
    # one set lookup: this check runs at every node of every schema compiled
    passing = frozenset(t for t, name in _TYPE_NAMES.items() if name in allowed)
    failing = frozenset(_TYPE_NAMES).difference(passing)

    def check(value: Any) -> bool:
        kind = type(value)
        if kind in passing:
            return True
        if kind in failing:
            return False
        return _json_type(value) in allowed

    return check


def _enum_check(values: Any) -> Check:
    if not all(isinstance(v, str) for v in values):
        raise ValueError("the fast metaschema check reads string enums only")
    allowed = frozenset(values)

    def check(value: Any) -> bool:
        if type(value) is str:
            return value in allowed
        _json_type(value)  # (raises on a value that is not JSON)
        return isinstance(value, str) and value in allowed

    return check


def _any(checks: list[Check]) -> Check:
    """A check that one of ``checks`` passes (in order, stopping at the first that does)."""

    def check(value: Any) -> bool:
        for one in checks:  # noqa: SIM110 - no generator per call: this runs per schema node
            if one(value):
                return True
        return False

    return check


def _members(value: dict[Any, Any]) -> Any:
    """The members of an object (``UnknownValue`` for a name that is not a string)."""
    if not _STR.issuperset(map(type, value)) and not all(isinstance(key, str) for key in value):
        raise UnknownValue("a member name that is not a string")
    return value.items()


_STR = frozenset({str})


def _every(checks: list[Check]) -> Check:
    """A check that all of ``checks`` pass (in order, stopping at the first that fails)."""

    def check(value: Any) -> bool:
        for one in checks:  # noqa: SIM110 - no generator per call: this runs per schema node
            if not one(value):
                return False
        return True

    return check


def _unique_strings(value: Any) -> bool:
    if not isinstance(value, list):
        return True
    if not all(isinstance(v, str) for v in value):
        raise UnknownValue("uniqueItems over values that are not strings")
    return len(set(value)) == len(value)


class _Compiler:
    """Closures for the sub-schemas of one metaschema (``$ref`` within the document only)."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.refs: dict[str, Check] = {}
        self.root = self.compile(document)

    def ref(self, pointer: str) -> Check:
        if pointer not in self.refs:
            if not pointer.startswith("#"):
                raise ValueError(f"the fast metaschema check reads local $refs only: {pointer}")
            node: Any = self.document
            for part in filter(None, pointer[1:].split("/")):
                node = node[part.replace("~1", "/").replace("~0", "~")]
            self.refs[pointer] = self.compile(node)
        return self.refs[pointer]

    def compile(self, node: Any) -> Check:
        if node is True:
            return lambda value: True
        if node is False:
            return lambda value: False
        checks = [self.keyword(key, value, node) for key, value in node.items()]
        live = [c for c in checks if c is not None]
        if len(live) == 1:
            return live[0]
        return _every(live)

    def keyword(self, key: str, value: Any, node: dict[str, Any]) -> Check | None:
        if key in _ANNOTATIONS or (key == "definitions" and node is self.document):
            return None
        if key == "$ref":
            return self.ref_check(value)
        if key == "type":
            return _types_check(value)
        if key == "enum":
            return _enum_check(value)
        if key in ("anyOf", "allOf"):
            subs = [self.compile(s) for s in value]
            return _any(subs) if key == "anyOf" else _every(subs)
        if key == "items":
            return self.items(self.compile(value))
        if key == "minItems":
            return lambda v: not isinstance(v, list) or len(v) >= value
        if key == "uniqueItems":
            return _unique_strings if value else None
        if key in ("minimum", "exclusiveMinimum"):
            strict = key == "exclusiveMinimum"
            return lambda v: (
                _json_type(v) not in ("integer", "number") or (v > value if strict else v >= value)
            )
        if key == "pattern":
            regex = re.compile(value)
            return lambda v: not isinstance(v, str) or regex.search(v) is not None
        if key == "properties":
            return self.properties({k: self.compile(s) for k, s in value.items()})
        if key == "additionalProperties":
            return self.additional(set(node.get("properties", {})), self.compile(value))
        if key == "propertyNames":
            return self.names(self.compile(value))
        raise ValueError(f"the fast metaschema check does not read {key!r}")

    def ref_check(self, pointer: str) -> Check:
        """The check of ``pointer``, compiled at its first use (the metaschemas recurse)."""
        resolved: list[Check] = []

        def check(value: Any) -> bool:
            if not resolved:
                resolved.append(self.ref(pointer))
            return resolved[0](value)

        return check

    @staticmethod
    def items(sub: Check) -> Check:
        def check(value: Any) -> bool:
            if not isinstance(value, list):
                return True
            for item in value:  # noqa: SIM110 - no generator per call
                if not sub(item):
                    return False
            return True

        return check

    @staticmethod
    def properties(subs: dict[str, Check]) -> Check:
        def check(value: Any) -> bool:
            if not isinstance(value, dict):
                return True
            for key, item in _members(value):
                sub = subs.get(key)
                if sub is not None and not sub(item):
                    return False
            return True

        return check

    @staticmethod
    def additional(declared: set[str], sub: Check) -> Check:
        def check(value: Any) -> bool:
            if not isinstance(value, dict):
                return True
            for key, item in _members(value):  # noqa: SIM110 - no generator per call
                if key not in declared and not sub(item):
                    return False
            return True

        return check

    @staticmethod
    def names(sub: Check) -> Check:
        return lambda v: not isinstance(v, dict) or all(sub(k) for k, _ in _members(v))
