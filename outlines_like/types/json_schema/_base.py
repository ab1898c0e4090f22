"""The converter's shared state, errors and the keyword tables every pass reads."""

from __future__ import annotations

import json
import warnings
from typing import Any, Final

from outlines_like.errors import InvalidConstraintError, UnenforcedKeywordWarning
from outlines_like.types.json_schema._text import Rx

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
    "multipleOf",
    "not",
    "if",
    "patternProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "minProperties",
    "maxProperties",
    "propertyNames",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "$recursiveRef",
)


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
    "format": "string",
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
    def invalid(path: str, why: str) -> InvalidConstraintError:
        return InvalidConstraintError(f"invalid JSON Schema at {path}: {why}")

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
