"""JSON Schema -> regex: one regular expression for the documents a schema accepts.

The regex matches the JSON text of every valid document written in one whitespace policy
(compact by default, as ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``),
with object properties in schema order. It uses only what the token masker's regex engine
(and ``interegular``) reads: no lookarounds, no backreferences, no lazy quantifiers, character
classes written out. ``docs/json_schema.md`` lists every keyword and what happens to it.

A keyword that narrows the valid documents but cannot be enforced raises
:class:`~outlines_like.errors.InvalidConstraintError` naming the keyword and where it sits; with
``lenient=True`` it warns (:class:`UnenforcedKeywordWarning`) and is dropped. Nothing is
dropped silently.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from outlines_like.errors import InvalidConstraintError, UnenforcedKeywordWarning
from outlines_like.types import _regex as rx
from outlines_like.types._charset import (
    SURROGATES,
    Ranges,
    complement,
    difference,
    normalize,
    union,
)
from outlines_like.types.predefined import FORMAT_PATTERNS

__all__ = ["UnenforcedKeywordWarning", "json_schema_to_regex"]


# A regex, or None for the empty language (no document fits).
_Rx = str | None

# Keywords that never change which documents are valid.
_ANNOTATIONS: Final[frozenset[str]] = frozenset(
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
_UNENFORCED: Final[tuple[str, ...]] = (
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
_TYPES: Final[tuple[str, ...]] = (
    "object",
    "array",
    "string",
    "number",
    "integer",
    "boolean",
    "null",
)
# Keywords that imply a type when `type` is absent (a schema without `type` takes these).
_TYPE_HINTS: Final[dict[str, str]] = {
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
_KINDS: Final[dict[str, str]] = {
    "object": "object",
    "array": "array",
    "string": "string",
    "number": "number",
    "integer": "number",
    "boolean": "boolean",
    "null": "null",
}
_EXTRA_PATTERNS: Final = "x-outlines-like-patterns"  # patterns merged from allOf beyond the first
_EXTRA_FORMATS: Final = "x-outlines-like-formats"
_NEVER: Final = "x-outlines-like-never"

_INTEGER: Final = r"-?(?:0|[1-9][0-9]*)"
_NUMBER: Final = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_STRING_CHAR: Final = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
# A character of a length-bounded string: raw, or a two-character escape. No \u escapes: a
# counted \uXXXX costs the DFA six states per position (a 200-character limit would need
# 1,200), and surrogate pairs would count as two characters. Control characters other than
# \b \f \n \r \t (which JSON must write as \u00XX) therefore cannot appear in them.
_STRING_CHAR_COUNTED: Final = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])'
_STRING: Final = f'"{_STRING_CHAR}*"'
_REGEX_SPECIALS: Final = frozenset(".^$*+?{}[]\\|()")


# ---------------------------------------------------------------------------- regex helpers


def _esc(text: str) -> str:
    """Escape ``text`` as a regex literal (metacharacters only; everything else stays raw)."""
    return "".join("\\" + c if c in _REGEX_SPECIALS else c for c in text)


def _seq(*parts: _Rx) -> _Rx:
    """Concatenate; the empty language absorbs everything."""
    if any(p is None for p in parts):
        return None
    return "".join(p for p in parts if p is not None)


def _alt(parts: Iterable[_Rx]) -> _Rx:
    """Alternation of the parts that are not empty languages (duplicates removed)."""
    kept: list[str] = []
    for p in parts:
        if p is not None and p not in kept:
            kept.append(p)
    if not kept:
        return None
    if len(kept) == 1:
        return kept[0]
    return "(?:" + "|".join(kept) + ")"


def _opt(part: _Rx) -> str:
    """``part`` or nothing."""
    if not part:
        return ""
    return f"(?:{part})?"


def _is_atom(regex: str) -> bool:
    """Whether a quantifier after ``regex`` applies to all of it (a char, class or group)."""
    if len(regex) == 1 or (len(regex) == 2 and regex[0] == "\\"):
        return regex not in _REGEX_SPECIALS
    if regex[0] not in "([":
        return False
    depth, i, in_class = 0, 0, False
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            if not in_class and regex[0] == "[":
                return i == len(regex) - 1
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i == len(regex) - 1
        i += 1
    return False


def _repeat(part: _Rx, low: int, high: int | None) -> _Rx:
    """``part`` repeated ``low`` to ``high`` times (``None``: unbounded)."""
    if high is not None and high < low:
        return None
    if high == 0:
        return ""
    if part is None:
        return "" if low == 0 else None
    if part == "":
        return ""
    body = part if _is_atom(part) else f"(?:{part})"
    if high is None:
        return body + ("*" if low == 0 else "+" if low == 1 else f"{{{low},}}")
    if low == high:
        return part if low == 1 else f"{body}{{{low}}}"
    if (low, high) == (0, 1):
        return body + "?"
    return f"{body}{{{low},{high}}}"


# ------------------------------------------------------------------- integers and numbers


def _same_length_range(lo: str, hi: str) -> str:
    """Regex for the digit strings of one length between ``lo`` and ``hi`` (inclusive)."""
    if not lo:
        return ""
    if lo == hi:
        return lo
    rest = len(lo) - 1
    if lo[0] == hi[0]:
        return lo[0] + _same_length_range(lo[1:], hi[1:])
    if lo[1:] == "0" * rest and hi[1:] == "9" * rest:
        return f"[{lo[0]}-{hi[0]}]" + ("[0-9]" * rest if rest < 3 else f"[0-9]{{{rest}}}")
    parts = [lo[0] + _same_length_range(lo[1:], "9" * rest)]
    low_mid, high_mid = int(lo[0]) + 1, int(hi[0]) - 1
    if low_mid <= high_mid:
        digit = str(low_mid) if low_mid == high_mid else f"[{low_mid}-{high_mid}]"
        parts.append(digit + ("[0-9]" * rest if rest < 3 else f"[0-9]{{{rest}}}"))
    parts.append(hi[0] + _same_length_range("0" * rest, hi[1:]))
    return "(?:" + "|".join(parts) + ")"


def _natural_range(lo: int, hi: int | None) -> _Rx:
    """Regex for the non-negative integers in ``[lo, hi]`` written without leading zeros."""
    if hi is not None and hi < lo:
        return None
    parts: list[str] = []
    top = hi if hi is not None else 10 ** len(str(lo)) - 1
    for length in range(len(str(lo)), len(str(top)) + 1):
        first = max(lo, 10 ** (length - 1) if length > 1 else 0)
        last = min(top, 10**length - 1)
        if first <= last:
            parts.append(_same_length_range(str(first), str(last)))
    if hi is None:
        parts.append(f"[1-9][0-9]{{{len(str(lo))},}}")
    return _alt(parts)


def _integer_range(lo: int | None, hi: int | None) -> _Rx:
    """Regex for the integers in ``[lo, hi]`` (``None``: unbounded), as JSON writes them."""
    if lo is None and hi is None:
        return _INTEGER
    if lo is not None and hi is not None and lo > hi:
        return None
    parts: list[_Rx] = []
    if lo is None or lo < 0:  # negative part: -n with n in [max(1, -hi), -lo]
        n_lo = max(1, -hi) if hi is not None else 1
        n_hi = None if lo is None else -lo
        part = _natural_range(n_lo, n_hi)
        parts.append(None if part is None else "-" + part)
    if hi is None or hi >= 0:
        parts.append(_natural_range(max(0, lo if lo is not None else 0), hi))
    return _alt(parts)


def _positive_decimal_range(lo: int, lo_excl: bool, hi: int | None, hi_excl: bool) -> _Rx:
    """Regex for plain decimals (no exponent) ``x`` with ``lo <(=) x <(=) hi``, integer bounds."""
    fraction = r"(?:\.[0-9]+)?"
    if hi is not None and (hi < lo or (hi == lo and (lo_excl or hi_excl))):
        return None
    if hi is not None and hi == lo:
        return f"{lo}(?:\\.0+)?"
    parts: list[_Rx] = []
    # integer part == lo
    parts.append(f"{lo}\\.0*[1-9][0-9]*" if lo_excl else f"{lo}{fraction}")
    # integer part strictly between the bounds: any fraction
    middle = _natural_range(lo + 1, None if hi is None else hi - 1)
    if middle is not None:
        parts.append(f"{middle}{fraction}" if middle.startswith("(") else f"(?:{middle}){fraction}")
    if hi is not None and not hi_excl:
        parts.append(f"{hi}(?:\\.0+)?")
    return _alt(parts)


def _number_range(lo: int | None, lo_excl: bool, hi: int | None, hi_excl: bool) -> _Rx:
    """Regex for JSON numbers in a range with integer bounds, in plain decimal notation."""
    parts: list[_Rx] = []
    if lo is None or lo < 0:  # negative numbers -y, y > 0
        if hi is not None and hi < 0:
            y_lo, y_lo_excl = -hi, hi_excl
        else:
            y_lo, y_lo_excl = 0, True
        if lo is None:
            y_part = _positive_decimal_range(y_lo, y_lo_excl, None, False)
        else:
            y_part = _positive_decimal_range(y_lo, y_lo_excl, -lo, lo_excl)
        parts.append(None if y_part is None else "-" + y_part)
    if hi is None or (hi >= 0 and not (hi == 0 and hi_excl)):
        if lo is None or lo < 0:
            parts.append(_positive_decimal_range(0, False, hi, hi_excl))
        else:
            parts.append(_positive_decimal_range(lo, lo_excl, hi, hi_excl))
    return _alt(parts)


# --------------------------------------------------------------------- pattern translation


def _class_char(cp: int) -> str:
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02x}"
    c = chr(cp)
    return "\\" + c if c in "\\]^-[" else c


def _class_body(ranges: Ranges) -> str:
    return "".join(
        _class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in ranges
    )


def _ranges_to_json_rx(ranges: Ranges) -> _Rx:
    r"""Regex for the JSON-string text of one character from ``ranges``.

    Characters JSON must escape (``"``, ``\``, control characters) become their escape as
    ``json.dumps`` writes it; surrogates (never valid alone) are dropped. Wide sets are written
    as a negated class (``[^...]``), which engines and generators handle faster.
    """
    ranges = normalize(ranges)
    unsafe = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), SURROGATES)
    safe = difference(ranges, unsafe)
    alternatives: list[str] = []
    excluded = complement(union(safe, (SURROGATES,)))
    if safe == complement(unsafe):
        alternatives.append(r'[^"\\\x00-\x1f]')
    elif len(safe) == 1 and safe[0][0] == safe[0][1]:
        alternatives.append(_esc(chr(safe[0][0])))
    elif safe and len(excluded) < len(safe):
        alternatives.append(f"[^{_class_body(excluded)}]")
    elif safe:
        alternatives.append(f"[{_class_body(safe)}]")
    # escaped characters, as json.dumps writes them: \" \\ \b \t \n \f \r, others \u00XX
    escaped = [cp for lo, hi in ranges for cp in range(lo, min(hi, 0x5C) + 1)]
    short = "".join(
        {0x22: '"', 0x5C: "\\\\", 8: "b", 9: "t", 10: "n", 12: "f", 13: "r"}.get(cp, "")
        for cp in escaped
    )
    if short:
        alternatives.append("\\\\" + (short if len(short) == 1 else f"[{short}]"))
    long = [cp for cp in escaped if cp < 0x20 and cp not in (8, 9, 10, 12, 13)]
    if len(long) == 27:
        alternatives.append(r"\\u00(?:0[0-7bef]|1[0-9a-f])")
    else:
        alternatives.extend(f"\\\\u{cp:04x}" for cp in long)
    return _alt(alternatives)


class _Untranslatable(Exception):
    """A valid pattern with no regular equivalent (backreference, lookaround, flag...)."""


class _PatternTranslator:
    """Translate a JSON Schema ``pattern`` into a regex over the JSON text of the string."""

    def __init__(self, pattern: str, path: str) -> None:
        self.pattern = pattern
        self.path = path

    def fail(self, why: str) -> _Untranslatable:
        return _Untranslatable(f"{self.pattern!r}: {why}")

    def translate(self) -> str:
        try:
            tree = rx.parse_regex(self.pattern, classes="ecma", possessive=True, where="pattern")
        except rx.RegexFeatureError as exc:
            raise _Untranslatable(str(exc)) from exc
        except InvalidConstraintError as exc:
            raise InvalidConstraintError(
                f"pattern {self.pattern!r} at {self.path} is not a valid regex: {exc}"
            ) from exc
        result = self.top(tree)
        if result is None:
            raise InvalidConstraintError(
                f"pattern {self.pattern!r} at {self.path} matches no JSON string"
            )
        return result

    def top(self, node: rx.Node, anchored_start: bool = False) -> _Rx:
        """A whole (unanchored unless ``^``/``$``) pattern: JSON Schema patterns search."""
        items = list(node.items) if isinstance(node, rx.Concat) else [node]
        if items and items[0] == rx.Anchor("start"):
            anchored_start, items = True, items[1:]
        if len(items) == 1 and isinstance(items[0], rx.Alt):  # ^a$|^b$
            return _alt(self.top(branch, anchored_start) for branch in items[0].items)
        anchored_end = bool(items) and items[-1] == rx.Anchor("end")
        if anchored_end:
            items = items[:-1]
        body = _seq(*(self.item(item) for item in items))
        any_text = f"{_STRING_CHAR}*"
        return _seq("" if anchored_start else any_text, body, "" if anchored_end else any_text)

    def item(self, node: rx.Node) -> _Rx:
        if isinstance(node, rx.Chars):
            return _ranges_to_json_rx(node.ranges)
        if isinstance(node, rx.Repeat):
            return _repeat(self.item(node.item), node.low, node.high)
        if isinstance(node, (rx.Concat, rx.Atomic)):  # a group
            items = node.items if isinstance(node, rx.Concat) else (node.item,)
            inner = _seq(*(self.item(item) for item in items))
            return None if inner is None else f"(?:{inner})"
        if isinstance(node, rx.Alt):
            return _alt(self.item(branch) for branch in node.items)
        raise self.fail(f"anchor at position {node.pos} is only supported at the very start or end")


def _pattern_width(pattern: str) -> tuple[int, int | None]:
    """Fewest and most characters a (fully matching) regex can span; ``None``: unbounded."""
    try:
        tree = rx.parse_regex(pattern, classes="unicode", possessive=True, inline_flags=True)
    except InvalidConstraintError:  # translating it fails with the reason
        return 0, None
    return rx.width(tree)


# ------------------------------------------------------------------------------ literals


def _canonical(value: Any) -> str:
    """A key for JSON equality (``1 == 1.0``, ``true != 1``)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _kind_of_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


# --------------------------------------------------------------------------- the converter


class _Converter:
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

    # ---------------------------------------------------------------- errors and warnings

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

    # ---------------------------------------------------------------- $ref, allOf, merging

    def resolve(self, ref: str, path: str) -> tuple[Any, str]:
        """Return the schema a local JSON pointer names, and its path."""
        if not isinstance(ref, str) or not (ref == "" or ref.startswith("#")):
            raise self.invalid(
                path, f"$ref {ref!r} is not a local JSON pointer (only '#...' refs resolve)"
            )
        pointer = ref[1:] if ref.startswith("#") else ref
        if pointer and not pointer.startswith("/"):
            raise self.invalid(path, f"$ref {ref!r}: anchors are not supported, use '#/...'")
        node: Any = self.root
        for raw in pointer.split("/")[1:]:
            token = re.sub(r"%([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), raw)
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise self.invalid(path, f"$ref {ref!r} points to nothing (no {token!r})")
        return node, "#" + pointer

    def flatten(
        self, schema: Any, path: str, refs: list[str], seen: tuple[str, ...]
    ) -> dict[str, Any]:
        """Inline ``$ref`` and ``allOf`` at the top of ``schema`` into one dict.

        The refs followed are appended to ``refs`` (for the recursion bound).
        """
        if schema is True:
            return {}
        if schema is False:
            return {_NEVER: True}
        if not isinstance(schema, dict):
            raise self.invalid(path, f"a schema must be an object or a boolean, not {schema!r}")
        node = self.upgrade(schema, path)
        parts: list[dict[str, Any]] = []
        if "$ref" in node:
            ref = node.pop("$ref")
            key = "#" + (ref[1:] if isinstance(ref, str) and ref.startswith("#") else str(ref))
            if key in seen:
                raise self.invalid(path, f"$ref {ref!r} refers to itself without nesting")
            target, target_path = self.resolve(ref, path)
            refs.append(key)
            parts.append(self.flatten(target, target_path, refs, (*seen, key)))
        if "allOf" in node:
            subs = node.pop("allOf")
            if not isinstance(subs, list) or not subs:
                raise self.invalid(path, "allOf must be a non-empty list")
            for i, sub in enumerate(subs):
                parts.append(self.flatten(sub, f"{path}/allOf/{i}", refs, seen))
        result = node
        for part in parts:
            result = self.merge(result, part, path)
        return result

    def upgrade(self, schema: dict[str, Any], path: str) -> dict[str, Any]:
        """Copy ``schema`` without annotations, older-draft spellings rewritten to 2020-12."""
        node = {k: v for k, v in schema.items() if k not in _ANNOTATIONS}
        for bound in ("Minimum", "Maximum"):
            flag = node.get("exclusive" + bound)
            if isinstance(flag, bool):  # draft 4: a flag on minimum/maximum
                del node["exclusive" + bound]
                if flag and bound.lower() in node:
                    node["exclusive" + bound] = node.pop(bound.lower())
        items = node.get("items")
        if isinstance(items, list):  # draft 4-7 tuples
            node["prefixItems"] = items
            node.pop("items")
            if "additionalItems" in node:
                node["items"] = node.pop("additionalItems")
        else:
            node.pop("additionalItems", None)  # without tuple items it has no effect
        if "const" in node:
            const = node.pop("const")
            node["enum"] = self.intersect_enums(node.get("enum"), [const], path)
        if node.get("uniqueItems") is False:
            del node["uniqueItems"]
        if "not" in node and node["not"] in ({}, True):
            del node["not"]
            node[_NEVER] = True
        return node

    @staticmethod
    def intersect_enums(a: Any, b: list[Any], path: str) -> list[Any]:
        if a is None:
            return b
        if not isinstance(a, list):
            raise InvalidConstraintError(f"invalid JSON Schema at {path}: enum must be a list")
        keys = {_canonical(v) for v in b}
        return [v for v in a if _canonical(v) in keys]

    def merge(self, a: dict[str, Any], b: dict[str, Any], path: str) -> dict[str, Any]:
        """The schema that both ``a`` and ``b`` accept (``allOf: [a, b]`` as one dict)."""
        out = dict(a)
        for key, value in b.items():
            if key not in out:
                out[key] = value
                continue
            mine = out[key]
            if key == "type":
                out[key] = self.intersect_types(mine, value, path)
            elif key == "enum":
                out[key] = self.intersect_enums(mine, value, path)
            elif key in ("minimum", "exclusiveMinimum", "minLength", "minItems"):
                out[key] = max(mine, value)
            elif key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems"):
                out[key] = min(mine, value)
            elif key == "required":
                out[key] = list(dict.fromkeys([*mine, *value]))
            elif key in ("pattern", "format"):
                if mine != value:
                    extra = _EXTRA_PATTERNS if key == "pattern" else _EXTRA_FORMATS
                    out[extra] = [*out.get(extra, []), value]
            elif key in (_EXTRA_PATTERNS, _EXTRA_FORMATS):
                out[key] = [*mine, *value]
            elif key in ("items", "additionalProperties"):
                out[key] = {"allOf": [mine, value]}
            elif key in ("anyOf", "oneOf"):
                out[key] = [{"allOf": [x, y]} for x in mine for y in value]
            elif key == "properties":
                continue  # merged below, with additionalProperties in view
            elif key == "prefixItems":
                continue
            else:
                out[key] = mine  # unenforced keywords: the first one is reported
        # A property declared on one side is also checked by the other's additionalProperties.
        if ("properties" in a or "properties" in b) and (
            ("properties" in a and "properties" in b)
            or "additionalProperties" in a
            or "additionalProperties" in b
        ):
            out["properties"] = self.merge_properties(a, b)
        if "prefixItems" in a or "prefixItems" in b:
            out["prefixItems"] = self.merge_prefix(a, b)
        return out

    @staticmethod
    def merge_properties(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        pa: dict[str, Any] = a.get("properties", {})
        pb: dict[str, Any] = b.get("properties", {})
        merged: dict[str, Any] = {}
        for name in dict.fromkeys([*pa, *pb]):
            left = pa.get(name, a.get("additionalProperties", True))
            right = pb.get(name, b.get("additionalProperties", True))
            merged[name] = {"allOf": [left, right]}
        return merged

    @staticmethod
    def merge_prefix(a: dict[str, Any], b: dict[str, Any]) -> list[Any]:
        xa: list[Any] = a.get("prefixItems", [])
        xb: list[Any] = b.get("prefixItems", [])
        out = []
        for i in range(max(len(xa), len(xb))):
            left = xa[i] if i < len(xa) else a.get("items", True)
            right = xb[i] if i < len(xb) else b.get("items", True)
            out.append({"allOf": [left, right]})
        return out

    @staticmethod
    def intersect_types(a: Any, b: Any, path: str) -> list[str]:
        sa = {a} if isinstance(a, str) else set(a)
        sb = {b} if isinstance(b, str) else set(b)
        both = sa & sb
        if ("number" in sa and "integer" in sb) or ("integer" in sa and "number" in sb):
            both.add("integer")
        return [t for t in _TYPES if t in both]

    # ------------------------------------------------------------------------ conversion

    def convert(self, schema: Any, path: str) -> _Rx:
        """Regex for the documents ``schema`` accepts (``None``: none)."""
        refs: list[str] = []
        flat = self.flatten(schema, path, refs, ())
        if isinstance(schema, dict) and "$ref" in schema and set(schema) <= _ANNOTATIONS | {"$ref"}:
            path = self.resolve(schema["$ref"], path)[1]  # report errors where the target is
        for ref in refs:
            if self.ref_stack.count(ref) > self.max_recursion_depth:
                return None  # recursion unrolled as deep as allowed: stop here
        self.ref_stack.extend(refs)
        try:
            return self.convert_flat(flat, path)
        finally:
            del self.ref_stack[len(self.ref_stack) - len(refs) :]

    def convert_flat(self, s: dict[str, Any], path: str) -> _Rx:
        if s.get(_NEVER):
            return None
        if not s:
            return self.any_value(self.max_any_depth)
        for keyword in _UNENFORCED:
            if keyword in s:
                self.unenforced(keyword, path)
                del s[keyword]
        for key in ("anyOf", "oneOf"):
            if key in s:
                branches = s.pop(key)
                if not isinstance(branches, list) or not branches:
                    raise self.invalid(path, f"{key} must be a non-empty list")
                return self.convert_union(s, key, branches, path)
        if "enum" in s:
            return self.convert_enum(s, path)
        types = self.types_of(s, path)
        builders: dict[str, Callable[[dict[str, Any], str], _Rx]] = {
            "null": lambda s, p: "null",
            "boolean": lambda s, p: "(?:true|false)",
            "string": self.convert_string,
            "integer": self.convert_integer,
            "number": self.convert_number,
            "array": self.convert_array,
            "object": self.convert_object,
        }
        if "number" in types and "integer" in types:
            types.remove("integer")
        return _alt(builders[t](s, path) for t in types)

    def types_of(self, s: dict[str, Any], path: str) -> list[str]:
        declared = s.get("type")
        if declared is None:
            implied = {_TYPE_HINTS[k] for k in s if k in _TYPE_HINTS}
            return [t for t in _TYPES if t in implied] if implied else list(_TYPES)
        names = [declared] if isinstance(declared, str) else declared
        if not isinstance(names, list):
            raise self.invalid(path + "/type", f"type must be a string or a list, not {declared!r}")
        for name in names:
            if name not in _TYPES:
                raise self.invalid(
                    path + "/type", f"unknown type {name!r} (expected one of {', '.join(_TYPES)})"
                )
        return [t for t in _TYPES if t in names]

    def convert_union(self, base: dict[str, Any], key: str, branches: list[Any], path: str) -> _Rx:
        plain = not base  # nothing beside the union: convert the branches as they are
        regexes: list[_Rx] = []
        subs: list[Any] = []
        for i, branch in enumerate(branches):
            sub = branch if plain else {"allOf": [dict(base), branch]}
            subs.append(sub)
            regexes.append(self.convert(sub, f"{path}/{key}/{i}"))
        if key == "oneOf":
            live = [(s, r) for s, r in zip(subs, regexes, strict=True) if r is not None]
            flats = [self.flatten(s, path, [], ()) for s, _ in live]
            self.check_disjoint(flats, [r for _, r in live], path)
        return _alt(regexes)

    def kinds_of(self, flat: dict[str, Any], path: str) -> set[str]:
        """The JSON kinds (first characters) the documents of a flattened schema can have."""
        if "anyOf" in flat or "oneOf" in flat:
            return set(_KINDS.values())
        if "enum" in flat:
            return {_kind_of_value(v) for v in flat["enum"]}
        return {_KINDS[t] for t in self.types_of(flat, path)}

    @staticmethod
    def enums_differ(a: dict[str, Any], b: dict[str, Any]) -> bool:
        """Whether both are enums (or consts) with no value in common."""
        if "enum" not in a or "enum" not in b:
            return False
        return not {_canonical(v) for v in a["enum"]} & {_canonical(v) for v in b["enum"]}

    def discriminated(self, a: dict[str, Any], b: dict[str, Any], path: str) -> bool:
        """Whether a property both objects require takes disjoint const/enum values."""
        both = set(a.get("required", [])) & set(b.get("required", []))
        for name in sorted(both):
            left = a.get("properties", {}).get(name)
            right = b.get("properties", {}).get(name)
            if left is None or right is None:
                continue
            if self.enums_differ(
                self.flatten(left, path, [], ()), self.flatten(right, path, [], ())
            ):
                return True
        return False

    def check_disjoint(self, flats: list[dict[str, Any]], regexes: list[str], path: str) -> None:
        """``oneOf`` is enforced as ``anyOf``: exact only when no document fits two branches.

        Branches are disjoint when their JSON kinds differ, when a property both require has
        disjoint const/enum values (a discriminator), or, failing those, when the
        intersection of their regexes is empty (interegular, for regexes of moderate size).
        """
        import interegular

        kinds = [self.kinds_of(flat, path) for flat in flats]
        fsms: dict[int, Any] = {}
        for i in range(len(regexes)):
            for j in range(i + 1, len(regexes)):
                if (
                    not kinds[i] & kinds[j]
                    or self.enums_differ(flats[i], flats[j])
                    or self.discriminated(flats[i], flats[j], path)
                ):
                    continue
                overlap = True
                if regexes[i] != regexes[j] and max(len(regexes[i]), len(regexes[j])) < 5000:
                    try:
                        for k in (i, j):
                            if k not in fsms:
                                fsms[k] = interegular.parse_pattern(regexes[k]).to_fsm()
                        overlap = not (fsms[i] & fsms[j]).empty()
                    except Exception:  # interegular failed on it: assume the branches overlap
                        overlap = True
                if overlap:
                    self.unenforced(
                        "oneOf",
                        path,
                        f"branches {i} and {j} may both accept a document, and a regex cannot "
                        "exclude documents that fit more than one branch (use anyOf)",
                    )
                    return

    def convert_enum(self, s: dict[str, Any], path: str) -> _Rx:
        values = s.pop("enum")
        if not isinstance(values, list):
            raise self.invalid(path + "/enum", "enum must be a list")
        if s:
            fits = self.validator(s)
            values = [v for v in values if fits(v)]
        return _alt(self.literal(v, path) for v in values)

    def validator(self, rest: dict[str, Any]) -> Callable[[Any], bool]:
        """A check that a value passes ``rest`` (the keywords beside ``enum``/``const``)."""
        import jsonschema

        document = {k: v for k, v in rest.items() if not k.startswith("x-outlines-like")}
        for defs in ("$defs", "definitions"):
            if defs in self.root:
                document[defs] = self.root[defs]
        validator_class = jsonschema.validators.validator_for(
            self.root, default=jsonschema.Draft202012Validator
        )
        return validator_class(document).is_valid  # type: ignore[no-any-return]

    def literal(self, value: Any, path: str) -> str:
        """Regex for exactly ``value``, written in the whitespace policy."""
        ws = self.ws
        if isinstance(value, dict):
            items = [
                f"{_esc(json.dumps(k, ensure_ascii=False))}{ws}:{ws}{self.literal(v, path)}"
                for k, v in value.items()
            ]
            return "\\{" + ws + f"{ws},{ws}".join(items) + ws + "\\}"
        if isinstance(value, list):
            inner = f"{ws},{ws}".join(self.literal(v, path) for v in value)
            return "\\[" + ws + inner + ws + "\\]"
        if isinstance(value, float) and not math.isfinite(value):
            raise self.invalid(path, f"{value!r} is not a JSON value")
        return _esc(json.dumps(value, ensure_ascii=False))

    # --------------------------------------------------------------------------- scalars

    def convert_string(self, s: dict[str, Any], path: str) -> _Rx:
        min_len = self.natural(s, "minLength", path) or 0
        max_len = self.natural(s, "maxLength", path)
        if max_len is not None and max_len < min_len:
            raise self.invalid(path, f"minLength {min_len} is greater than maxLength {max_len}")
        patterns = [p for p in [s.get("pattern"), *s.get(_EXTRA_PATTERNS, [])] if p is not None]
        formats = [f for f in [s.get("format"), *s.get(_EXTRA_FORMATS, [])] if f is not None]
        for extra in patterns[1:]:
            self.unenforced("pattern", path, f"a second pattern {extra!r} (from allOf)")
        for extra in formats[1:]:
            self.unenforced("format", path, f"a second format {extra!r} (from allOf)")
        pattern = patterns[0] if patterns else None
        fmt = formats[0] if formats else None
        if pattern is not None and not isinstance(pattern, str):
            raise self.invalid(path + "/pattern", "pattern must be a string")
        if fmt is not None and fmt not in FORMAT_PATTERNS:
            self.unenforced(
                "format", path, f"unknown format {fmt!r} (known: {', '.join(FORMAT_PATTERNS)})"
            )
            fmt = None
        if pattern is not None and fmt is not None:
            self.unenforced("format", path, "format and pattern together cannot be combined")
            fmt = None
        if pattern is not None or fmt is not None:
            source = pattern if pattern is not None else FORMAT_PATTERNS[str(fmt)]
            if min_len or max_len is not None:
                low, high = _pattern_width(source if fmt is not None else f"(?:{source})")
                # No regex intersection: the limits must already follow from the pattern.
                anchored = pattern is None or self.pattern_is_anchored(source)
                if low < min_len:
                    self.unenforced(
                        "minLength", path, f"the pattern/format can be shorter ({low} characters)"
                    )
                if max_len is not None and not (anchored and high is not None and high <= max_len):
                    self.unenforced(
                        "maxLength",
                        path,
                        "the pattern/format can be longer, and a length limit "
                        "cannot be combined with it",
                    )
            if pattern is None:
                return f'"(?:{source})"'
            try:
                return f'"{_PatternTranslator(pattern, path + "/pattern").translate()}"'
            except _Untranslatable as exc:
                self.unenforced("pattern", path, str(exc))
        if not min_len and max_len is None:
            return _STRING
        return _seq('"', _repeat(_STRING_CHAR_COUNTED, min_len, max_len), '"')

    @staticmethod
    def pattern_is_anchored(pattern: str) -> bool:
        return pattern.startswith("^") and pattern.endswith("$") and "|" not in pattern

    def natural(self, s: dict[str, Any], key: str, path: str) -> int | None:
        value = s.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise self.invalid(f"{path}/{key}", f"{key} must be a non-negative integer")
        if isinstance(value, float) and not value.is_integer():
            raise self.invalid(f"{path}/{key}", f"{key} must be an integer, not {value}")
        return int(value)

    def bounds(self, s: dict[str, Any], path: str) -> tuple[Any, Any, Any, Any]:
        out = []
        for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            value = s.get(key)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise self.invalid(f"{path}/{key}", f"{key} must be a finite number")
            out.append(value)
        return out[0], out[1], out[2], out[3]

    def convert_integer(self, s: dict[str, Any], path: str) -> _Rx:
        minimum, ex_min, maximum, ex_max = self.bounds(s, path)
        lows = [math.ceil(minimum) if minimum is not None else None]
        lows.append(math.floor(ex_min) + 1 if ex_min is not None else None)
        highs = [math.floor(maximum) if maximum is not None else None]
        highs.append(math.ceil(ex_max) - 1 if ex_max is not None else None)
        lo = max((v for v in lows if v is not None), default=None)
        hi = min((v for v in highs if v is not None), default=None)
        self.check_order(s, path)
        return _integer_range(lo, hi)

    def check_order(self, s: dict[str, Any], path: str) -> None:
        minimum, ex_min, maximum, ex_max = self.bounds(s, path)
        low = max((v for v in (minimum, ex_min) if v is not None), default=None)
        high = min((v for v in (maximum, ex_max) if v is not None), default=None)
        if low is not None and high is not None and low > high:
            raise self.invalid(
                path, f"the lower bound {low} is greater than the upper bound {high}"
            )

    def convert_number(self, s: dict[str, Any], path: str) -> _Rx:
        minimum, ex_min, maximum, ex_max = self.bounds(s, path)
        self.check_order(s, path)
        if all(v is None for v in (minimum, ex_min, maximum, ex_max)):
            return _NUMBER
        for key, value in (
            ("minimum", minimum),
            ("exclusiveMinimum", ex_min),
            ("maximum", maximum),
            ("exclusiveMaximum", ex_max),
        ):
            if value is not None and not float(value).is_integer():
                self.unenforced(
                    key, path, f"a non-integer bound ({value}) on a number (integer bounds only)"
                )
                s = {k: v for k, v in s.items() if k != key}
        minimum, ex_min, maximum, ex_max = self.bounds(s, path)
        lo, lo_excl = None, False
        if minimum is not None:
            lo = int(minimum)
        if ex_min is not None and (lo is None or ex_min >= lo):
            lo, lo_excl = int(ex_min), True
        hi, hi_excl = None, False
        if maximum is not None:
            hi = int(maximum)
        if ex_max is not None and (hi is None or ex_max <= hi):
            hi, hi_excl = int(ex_max), True
        if lo is None and hi is None:
            return _NUMBER
        return _number_range(lo, lo_excl, hi, hi_excl)

    # ---------------------------------------------------------------------- containers

    def any_value(self, depth: int) -> str:
        """Any JSON value nested at most ``depth`` containers deep."""
        if depth not in self._any_cache:
            scalars = ["null", "true", "false", _NUMBER, _STRING]
            if depth > 0:
                inner = self.any_value(depth - 1)
                sep = f"{self.ws},{self.ws}"
                member = f"{_STRING}{self.ws}:{self.ws}{inner}"
                scalars.append(f"\\[{self.ws}(?:{inner}(?:{sep}{inner})*)?{self.ws}\\]")
                scalars.append(f"\\{{{self.ws}(?:{member}(?:{sep}{member})*)?{self.ws}\\}}")
            self._any_cache[depth] = "(?:" + "|".join(scalars) + ")"
        return self._any_cache[depth]

    def sub(self, schema: Any, path: str) -> _Rx:
        """Regex for a sub-schema; ``True``/``{}`` is any value up to ``max_any_depth``."""
        return self.convert(schema, path)

    def convert_array(self, s: dict[str, Any], path: str) -> _Rx:
        min_items = self.natural(s, "minItems", path) or 0
        max_items = self.natural(s, "maxItems", path)
        if max_items is not None and max_items < min_items:
            raise self.invalid(path, f"minItems {min_items} is greater than maxItems {max_items}")
        prefix = s.get("prefixItems", [])
        if not isinstance(prefix, list):
            raise self.invalid(path + "/prefixItems", "prefixItems must be a list")
        sep = f"{self.ws},{self.ws}"
        count = len(prefix) if max_items is None else min(len(prefix), max_items)
        item_rx = self.sub(s.get("items", True), path + "/items")
        if count < len(prefix):
            tail: _Rx = ""
        else:
            rest_min = max(min_items - count, 0)
            rest_max = None if max_items is None else max_items - count
            if count == 0:
                if rest_max == 0 or item_rx is None:
                    tail = "" if rest_min == 0 else None
                else:
                    more = _repeat(
                        _seq(sep, item_rx),
                        max(rest_min - 1, 0),
                        None if rest_max is None else rest_max - 1,
                    )
                    tail = _seq(item_rx, more)
                    if rest_min == 0:
                        tail = _opt(tail)
            else:
                tail = _repeat(_seq(sep, item_rx), rest_min, rest_max)
        for i in range(count - 1, -1, -1):
            element = self.sub(prefix[i], f"{path}/prefixItems/{i}")
            tail = _seq(sep if i > 0 else "", element, tail)
            if i >= min_items:
                tail = _opt(tail)
        return _seq("\\[", self.ws, tail, self.ws, "\\]")

    def convert_object(self, s: dict[str, Any], path: str) -> _Rx:
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
        ws, sep = self.ws, f"{self.ws},{self.ws}"
        members: list[tuple[str, bool]] = []
        for name, schema in declared.items():
            value = self.sub(
                schema, f"{path}/properties/{name.replace('~', '~0').replace('/', '~1')}"
            )
            is_required = name in required
            if value is None:
                if is_required:
                    return None
                continue
            key = _esc(json.dumps(name, ensure_ascii=False))
            members.append((f"{key}{ws}:{ws}{value}", is_required))
        extra: _Rx = None
        if additional is not False and (additional is not None or not properties):
            value = self.sub(
                True if additional is None else additional, path + "/additionalProperties"
            )
            if value is not None:
                extra = f'"{self.key_excluding(list(declared))}"{ws}:{ws}{value}'
        # tails[i]: members i.. after something was written (each then needs a comma)
        tails: list[str] = [""] * (len(members) + 1)
        tails[-1] = "" if extra is None else f"(?:{sep}{extra})*"
        for i in range(len(members) - 1, -1, -1):
            member, is_required = members[i]
            tails[i] = (f"{sep}{member}" if is_required else f"(?:{sep}{member})?") + tails[i + 1]
        firsts: list[str] = []
        all_optional = True
        for i, (member, is_required) in enumerate(members):
            firsts.append(member + tails[i + 1])
            if is_required:
                all_optional = False
                break
        if all_optional and extra is not None:
            firsts.append(f"{extra}(?:{sep}{extra})*")
        body = _alt(firsts)
        if all_optional:
            body = _opt(body)
        return _seq("\\{", ws, body, ws, "\\}")

    @staticmethod
    def key_excluding(names: list[str]) -> str:
        r"""Regex for a key's text (inside the quotes) that decodes to none of ``names``.

        Built on the trie of ``names``: at each node, either stop (if the prefix is not a
        name), or write a character no name continues with and then anything, or follow a
        child. Up to the first difference, characters are written raw (a ``\u`` escape could
        spell a name's character); two-character escapes count as different characters when
        no name contains what they decode to.
        """
        escapes_differ = not any(c in name for name in names for c in '"\\\b\f\n\r\t')
        escape = r'\\["\\bfnrt]' if escapes_differ else ""
        anything = f"{_STRING_CHAR}*"
        if not names:
            return anything
        trie: dict[str, Any] = {}
        for name in names:
            node = trie
            for c in name:
                node = node.setdefault(c, {})
            node[""] = {}

        def walk(node: dict[str, Any]) -> str:
            options = [] if "" in node else [""]
            children = [c for c in node if c]
            if children:
                others = "".join(_class_char(ord(c)) for c in children)
                differ = f'[^"\\\\\\x00-\\x1f{others}]'
                if escape:
                    differ = f"(?:{differ}|{escape})"
                options.append(differ + anything)
            else:
                options.append(f"{_STRING_CHAR}+")
            options.extend(
                _esc(c) + walk(node[c]) for c in children if c not in '"\\' and ord(c) >= 0x20
            )
            return "(?:" + "|".join(options) + ")"

        return walk(trie)


def json_schema_to_regex(
    schema: dict[str, Any],
    *,
    whitespace_pattern: str | None = None,
    lenient: bool = False,
    max_recursion_depth: int = 3,
    max_any_depth: int = 2,
) -> str:
    """Return a regex matching exactly the JSON documents valid under ``schema``.

    Documents are written in one whitespace policy: compact (``json.dumps`` with
    ``separators=(",", ":")``) by default, object properties in schema order.

    Args:
        schema: The JSON Schema (draft 2020-12; drafts 4-7 spellings are read too).
        whitespace_pattern: Regex for the whitespace allowed between JSON tokens (e.g.
            ``"[ ]?"``); ``None`` allows none.
        lenient: Warn (:class:`UnenforcedKeywordWarning`) instead of raising when a keyword
            cannot be enforced, and ignore it.
        max_recursion_depth: How many times a recursive ``$ref`` is followed inside itself;
            deeper documents are excluded.
        max_any_depth: How deeply a value of the empty schema (``{}``/``true``, free
            ``additionalProperties`` or ``items``) may nest arrays and objects.

    Returns:
        A regex for ``re.fullmatch`` (also readable by ``interegular``).

    Raises:
        InvalidConstraintError: The schema is invalid, accepts no document, or uses a keyword
            the regex cannot enforce (unless ``lenient``); the message says where.
    """
    if not isinstance(schema, Mapping):
        raise InvalidConstraintError(
            f"a JSON Schema must be a dict (or a boolean), not {type(schema).__name__}"
        )
    schema = dict(schema)
    for name, value in (
        ("max_recursion_depth", max_recursion_depth),
        ("max_any_depth", max_any_depth),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidConstraintError(f"{name} must be a non-negative int, not {value!r}")
    if whitespace_pattern is not None:
        try:
            re.compile(whitespace_pattern)
        except re.error as exc:
            raise InvalidConstraintError(
                f"whitespace_pattern {whitespace_pattern!r} is not a valid regex: {exc}"
            ) from exc
    _check_against_metaschema(schema)
    converter = _Converter(
        schema,
        whitespace_pattern=whitespace_pattern,
        lenient=lenient,
        max_recursion_depth=max_recursion_depth,
        max_any_depth=max_any_depth,
    )
    regex = converter.sub(schema, "#")
    if regex is None:
        raise InvalidConstraintError("the JSON Schema accepts no document (within the bounds)")
    return regex


def _check_against_metaschema(schema: dict[str, Any]) -> None:
    """Raise ``InvalidConstraintError`` naming where ``schema`` breaks its metaschema.

    Without ``$schema``, a schema valid under draft 2020-12, 7 or 4 passes (the converter reads
    the older spellings: tuple ``items``, boolean ``exclusiveMinimum``).
    """
    import jsonschema

    declared = jsonschema.validators.validator_for(schema, default=None)
    candidates = (
        [declared]
        if declared is not None
        else [
            jsonschema.Draft202012Validator,
            jsonschema.Draft7Validator,
            jsonschema.Draft4Validator,
        ]
    )
    first_error = None
    for validator_class in candidates:
        error = jsonschema.exceptions.best_match(
            validator_class(validator_class.META_SCHEMA).iter_errors(schema)
        )
        if error is None:
            return
        first_error = first_error or error
    assert first_error is not None
    where = "#" + "".join(f"/{p}" for p in first_error.absolute_path)
    raise InvalidConstraintError(f"invalid JSON Schema at {where}: {first_error.message}")
