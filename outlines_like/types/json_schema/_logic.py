"""``not``, ``if``/``then``/``else`` and dependencies, rewritten as unions the regex can write.

A regex has no complement that stays small, so ``not`` is enforced only where the negation of
a flattened schema is itself a schema of simple parts (De Morgan over its keywords):

* ``type`` -> the other types (not ``integer`` alone: "a number with a fraction" has no
  keyword); ``enum``/``const`` of strings, booleans and ``null`` -> the other values (strings
  other than the listed ones through :data:`NOT_STRINGS`); ``required`` -> a member absent;
  ``properties`` -> a member present with a value under the negated schema; length, item and
  numeric bounds -> the opposite bound; ``anyOf`` -> ``allOf`` of the negations.

``if``/``then``/``else`` becomes ``anyOf: [allOf: [if, then], allOf: [not if, else]]`` when
``if`` can be negated (a discriminating property: ``{"properties": {"kind": {"const": "a"}},
"required": ["kind"]}``). ``dependentRequired``, ``dependentSchemas`` and draft 7's
``dependencies`` become ``anyOf: [member absent, member present and its dependency]``, at most
:data:`MAX_DEPENDENCIES` of them per object (each doubles the object's regex).

A ``oneOf`` whose branches only name types (Kubernetes' ``Quantity``:
``[{"type": ["string", "null"]}, {"type": ["number", "null"]}]``) becomes the types exactly one
branch names: a value of a type two branches name fits both, which ``oneOf`` excludes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from outlines_like.errors import InvalidConstraintError
from outlines_like.types.json_schema._base import CLOSED, NEVER, TYPES

NOT_STRINGS: Final = "x-outlines-like-not-strings"  # strings other than these

MAX_DEPENDENCIES: Final = 4

Flatten = Callable[[Any, str], dict[str, Any]]

_OPPOSITE_BOUND: Final[dict[str, tuple[str, str, int]]] = {
    # keyword -> (its type, the bound that negates it, offset added to the value)
    "minLength": ("string", "maxLength", -1),
    "maxLength": ("string", "minLength", 1),
    "minItems": ("array", "maxItems", -1),
    "maxItems": ("array", "minItems", 1),
    "minimum": ("number", "exclusiveMaximum", 0),
    "maximum": ("number", "exclusiveMinimum", 0),
    "exclusiveMinimum": ("number", "maximum", 0),
    "exclusiveMaximum": ("number", "minimum", 0),
}


def _other_types(*kinds: str) -> list[str]:
    """Every type but ``kinds`` (``number`` covers ``integer``)."""
    drop = set(kinds) | ({"integer"} if "number" in kinds else set())
    return [t for t in TYPES if t not in drop]


def negate(flat: dict[str, Any], flatten: Flatten, path: str) -> dict[str, Any] | None:
    """A schema for the values ``flat`` (a flattened schema) rejects; ``None``: none known."""
    flat = {k: v for k, v in flat.items() if k != CLOSED}
    if flat.get(NEVER):
        return {}
    if not flat:
        return {NEVER: True}
    parts: list[dict[str, Any]] = []
    for key, value in flat.items():
        part = _negate_keyword(key, value, flatten, path)
        if part is None:
            return None
        parts.append(part)
    return parts[0] if len(parts) == 1 else {"anyOf": parts}


def _negate_keyword(key: str, value: Any, flatten: Flatten, path: str) -> dict[str, Any] | None:
    if key == "type":
        names = {value} if isinstance(value, str) else set(value)
        if "integer" in names and "number" not in names:
            return None  # numbers with a fraction: no keyword says that
        return {"type": _other_types(*names)}
    if key == "enum":
        return _negate_enum(value)
    if key == NOT_STRINGS:
        return {"anyOf": [{"type": _other_types("string")}, {"enum": list(value)}]}
    if key == "required":
        absent = [{"type": "object", "properties": {name: False}} for name in value]
        return {"anyOf": [{"type": _other_types("object")}, *absent]}
    if key == "properties":
        present = []
        for name, sub in value.items():
            negated = negate(flatten(sub, f"{path}/properties/{name}"), flatten, path)
            if negated is None:
                return None
            present.append({"type": "object", "required": [name], "properties": {name: negated}})
        return {"anyOf": present} if present else {NEVER: True}
    if key in _OPPOSITE_BOUND:
        kind, opposite, offset = _OPPOSITE_BOUND[key]
        bound = value + offset
        if isinstance(bound, int) and bound < 0:
            return {NEVER: True}
        return {"type": kind, opposite: bound}
    if key == "anyOf":
        negated_all = []
        for i, sub in enumerate(value):
            negated = negate(flatten(sub, f"{path}/anyOf/{i}"), flatten, path)
            if negated is None:
                return None
            negated_all.append(negated)
        return {"allOf": negated_all}
    return None


def _negate_enum(values: list[Any]) -> dict[str, Any] | None:
    if any(not (v is None or isinstance(v, (bool, str))) for v in values):
        return None  # numbers, arrays, objects: their complement has no keyword
    strings = [v for v in values if isinstance(v, str)]
    branches: list[dict[str, Any]] = [{"type": ["object", "array", "number"]}]
    branches.append({"type": "string", NOT_STRINGS: strings} if strings else {"type": "string"})
    others = [b for b in (True, False) if not any(v is b for v in values)]
    if others:
        branches.append({"enum": others})
    if None not in values:
        branches.append({"type": "null"})
    return {"anyOf": branches}


def conditional(
    node: dict[str, Any], then: Any, otherwise: Any, flatten: Flatten, path: str
) -> dict[str, Any] | None:
    """``node``'s ``if``/``then``/``else`` as an ``anyOf`` (``None``: ``if`` has no negation)."""
    condition = flatten(node["if"], path + "/if")
    negated = negate(condition, flatten, path + "/if")
    if negated is None:
        return None
    return {"anyOf": [{"allOf": [condition, then]}, {"allOf": [negated, otherwise]}]}


def dependencies(node: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The ``anyOf``s that enforce ``node``'s dependencies; ``None``: too many to write."""
    found: list[tuple[str, Any]] = []
    for key in ("dependentRequired", "dependentSchemas", "dependencies"):
        value = node.get(key)
        if isinstance(value, dict):
            found.extend(value.items())
    if len(found) > MAX_DEPENDENCIES:
        return None
    unions = []
    for name, dependency in found:
        if isinstance(dependency, list):
            present: dict[str, Any] = {"required": [name, *dependency]}
        else:
            present = {"allOf": [{"required": [name]}, dependency]}
        unions.append({"anyOf": [{"properties": {name: False}}, present]})
    return unions


def one_of_types(branches: Any, flatten: Flatten, path: str) -> dict[str, Any] | None:
    """``oneOf: branches`` as a ``type``, when every branch only names types; else ``None``.

    The values a single branch accepts are those of the types exactly one branch names. Not
    where one branch names ``integer`` and another ``number`` (a number with a fraction fits
    one, an integral one both: no keyword says that).
    """
    if not isinstance(branches, list) or not branches:
        return None
    counts: dict[str, int] = {}
    for i, branch in enumerate(branches):
        try:
            flat = flatten(branch, f"{path}/oneOf/{i}")
        except InvalidConstraintError:  # (a branch that refers to its own schema, say)
            return None  # the union's own conversion reports what is wrong
        if flat.keys() != {"type"}:
            return None
        declared = flat["type"]
        names = [declared] if isinstance(declared, str) else declared
        if not isinstance(names, list) or not names or not all(n in TYPES for n in names):
            return None  # (the metaschema check names an invalid type)
        kinds = set(names)
        if "number" in kinds:
            kinds.discard("integer")
        for kind in kinds:
            counts[kind] = counts.get(kind, 0) + 1
    if "integer" in counts and "number" in counts:
        return None
    once = [t for t in TYPES if counts.get(t) == 1]
    return {"type": once} if once else {NEVER: True}
