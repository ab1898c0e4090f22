"""The converter's shared state, errors and the keyword tables every pass reads."""

from __future__ import annotations

import json
import re
import warnings
from typing import Any, Final

from outlines_like.errors import InvalidConstraintError, UnenforcedKeywordWarning
from outlines_like.types.json_schema._text import Rx, esc

# Keywords that never change which documents are valid.
ANNOTATIONS: Final[frozenset[str]] = frozenset(
    {
        "title",
        "description",
        "examples",
        "example",
        "default",
        "$schema",
        "$id",
        "$comment",
        "$anchor",
        "$vocabulary",
        "$defs",
        "definitions",
        "readOnly",
        "writeOnly",
        "deprecated",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
        "discriminator",
        "then",
        "else",
    }
)


# Keywords that narrow the valid documents and that this converter does not enforce.
UNENFORCED: Final[tuple[str, ...]] = (
    "not",
    "if",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "$recursiveRef",
)
_UNENFORCED_SET: Final = frozenset(UNENFORCED)


TYPES: Final[tuple[str, ...]] = (
    "object",
    "array",
    "string",
    "number",
    "integer",
    "boolean",
    "null",
)


# Keywords that imply a type when `type` is absent (a schema without `type` takes these).
# `format` is not one: without `type` it constrains strings and lets other values through.
TYPE_HINTS: Final[dict[str, str]] = {
    "properties": "object",
    "required": "object",
    "additionalProperties": "object",
    "items": "array",
    "prefixItems": "array",
    "minItems": "array",
    "maxItems": "array",
    "minLength": "string",
    "maxLength": "string",
    "pattern": "string",
    "minimum": "number",
    "maximum": "number",
    "exclusiveMinimum": "number",
    "exclusiveMaximum": "number",
}


KINDS: Final[dict[str, str]] = {
    "object": "object",
    "array": "array",
    "string": "string",
    "number": "number",
    "integer": "number",
    "boolean": "boolean",
    "null": "null",
}


EXTRA_PATTERNS: Final = "x-outlines-like-patterns"  # patterns merged from allOf beyond the first


EXTRA_FORMATS: Final = "x-outlines-like-formats"


NEVER: Final = "x-outlines-like-never"


# Keywords two allOf entries give different values that cannot be merged into one.
UNMERGED: Final = "x-outlines-like-unmerged"


# On an object with declared members and no `additionalProperties`: write only the declared
# members (a `oneOf` branch, so that a required member tells the branches apart).
CLOSED: Final = "x-outlines-like-closed"

# The keys of a schema that is only a $ref (its annotations aside).
REF_ONLY: Final = ANNOTATIONS | {"$ref"}

_MEMBER_KEYS: dict[str, str] = {}  # member name -> its regex, shared by every converter
_MAX_MEMBER_KEYS: Final = 65_536


def clear_member_keys() -> None:
    """Empty the member names' regexes shared by every translation."""
    _MEMBER_KEYS.clear()


# flatten's results by (id of the schema, refs being followed): the schema (held, so that its
# id is not reused), its flat dict (never handed out itself), the refs it followed
FlatCache = dict[tuple[int, tuple[str, ...]], tuple[Any, dict[str, Any], list[str]]]


def canonical(value: Any) -> str:
    """A key for JSON equality (``1 == 1.0``, ``true != 1``)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def kind_of_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


class ConverterBase:
    """Walks one schema document; remembers the root (for ``$ref``) and the options."""

    def __init__(
        self,
        root: dict[str, Any],
        *,
        whitespace_pattern: str | None,
        lenient: bool,
        max_recursion_depth: int,
        max_any_depth: int,
    ) -> None:
        self.root = root
        self.ws = "" if not whitespace_pattern else f"(?:{whitespace_pattern})"
        self.lenient = lenient
        self.max_recursion_depth = max_recursion_depth
        self.max_any_depth = max_any_depth
        self.ref_stack: list[str] = ["#"]
        self._any_cache: dict[int, str] = {}
        self.flat_cache: FlatCache = {}
        self.resolved: dict[str, tuple[Any, str]] = {}  # RefsMixin.resolve's, by $ref
        # a union's branch list (by identity, kept alive here) -> the values each branch
        # lists (``listed_values``): merged siblings share the list of the schema they come from
        self.listed: dict[int, tuple[list[Any], list[list[Any] | None]]] = {}

    def unenforced(self, keyword: str, path: str, why: str = "") -> None:
        """Raise (or, when lenient, warn) that ``keyword`` at ``path`` is not enforced."""
        message = f"keyword {keyword!r} at {path}/{keyword} is not enforced by the regex"
        message += f": {why}" if why else ""
        if not self.lenient:
            raise InvalidConstraintError(
                message + " (pass lenient=True to ignore it with a warning)"
            )
        warnings.warn(message + "; ignored", UnenforcedKeywordWarning, stacklevel=5)

    @staticmethod
    def member_key(name: str) -> str:
        """The regex of a member name written as a JSON string (kept per name, all schemas).

        Each translation writes a name twice (the regex attempt, then the grammar) and
        schemas share most names (``apiVersion``, ``kind``, ``metadata``).
        """
        key = _MEMBER_KEYS.get(name)
        if key is None:
            if len(_MEMBER_KEYS) >= _MAX_MEMBER_KEYS:
                _MEMBER_KEYS.clear()
            key = _MEMBER_KEYS[name] = esc(json.dumps(name, ensure_ascii=False))
        return key

    @staticmethod
    def invalid(path: str, why: str) -> InvalidConstraintError:
        return InvalidConstraintError(f"invalid JSON Schema at {path}: {why}")

    def take_union(self, s: dict[str, Any], path: str) -> tuple[str, list[Any]] | None:
        """Drop ``s``'s unenforced keywords; pop its ``anyOf``/``oneOf``.

        Unenforced keywords raise, or warn when lenient. Returns ``(keyword, branches)``, or
        ``None`` when ``s`` has neither.
        """
        if not s.keys().isdisjoint(_UNENFORCED_SET):
            for keyword in UNENFORCED:
                if keyword in s:
                    self.unenforced(keyword, path)
                    del s[keyword]
        for keyword in s.pop(UNMERGED, []):
            self.unenforced(keyword, path, "two different values from allOf cannot be merged")
            s.pop(keyword, None)
        for key in ("anyOf", "oneOf"):
            if key in s:
                branches = s.pop(key)
                if not isinstance(branches, list) or not branches:
                    raise self.invalid(path, f"{key} must be a non-empty list")
                return key, branches
        return None

    def array_bounds(self, s: dict[str, Any], path: str) -> tuple[int, int | None, list[Any]]:
        """An array's ``(minItems, maxItems, prefixItems)``, checked."""
        min_items = self.natural(s, "minItems", path) or 0
        max_items = self.natural(s, "maxItems", path)
        if max_items is not None and max_items < min_items:
            raise self.invalid(path, f"minItems {min_items} is greater than maxItems {max_items}")
        prefix = s.get("prefixItems", [])
        if not isinstance(prefix, list):
            raise self.invalid(path + "/prefixItems", "prefixItems must be a list")
        return min_items, max_items, prefix

    def declared_members(self, s: dict[str, Any], path: str) -> dict[str, Any] | None:
        """An object's members by name, or ``None`` when no document fits.

        ``properties``, plus the required names it does not declare (typed by
        ``additionalProperties``).
        """
        properties = s.get("properties", {})
        if not isinstance(properties, dict):
            raise self.invalid(path + "/properties", "properties must be an object")
        required = s.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise self.invalid(path + "/required", "required must be a list of strings")
        additional = s.get("additionalProperties")
        declared = dict(properties)
        for name in required:  # required but undeclared: validated by additionalProperties
            if name not in declared:
                if additional is False:
                    return None
                declared[name] = True if additional is None else additional
        return declared

    def natural(self, s: dict[str, Any], key: str, path: str) -> int | None:
        value = s.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise self.invalid(f"{path}/{key}", f"{key} must be a non-negative integer")
        if isinstance(value, float) and not value.is_integer():
            raise self.invalid(f"{path}/{key}", f"{key} must be an integer, not {value}")
        return int(value)

    def sub(self, schema: Any, path: str) -> Rx:
        """The regex of a subschema (the driver defines it)."""
        raise NotImplementedError

    def grown(self, size: int, path: str) -> None:
        """A regex of ``size`` characters is being written at ``path`` (budgets override)."""

    def work(self, path: str) -> None:
        """Called once per sub-schema converted (a budget's time check overrides it)."""


def check_whitespace_pattern(pattern: str | None) -> None:
    """Refuse a ``whitespace_pattern`` that is not a regex.

    Raises:
        InvalidConstraintError: it does not compile.
    """
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidConstraintError(
            f"whitespace_pattern {pattern!r} is not a valid regex: {exc}"
        ) from exc
