"""JSON Schema rewrites the server dialects need: schema names, closed objects, OpenAI strict mode.

Every function here returns a new schema and leaves its argument untouched.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from outlines_like.errors import UnsupportedConstraintError
from outlines_like.types.json_schema.pointer import PointerError, resolve_pointer

__all__ = ["close_objects", "schema_name", "to_openai_strict"]

_NAME_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]+")

# Keywords OpenAI's strict mode rejects (its "Supported schemas" guide). Each maps to a hint.
_OPENAI_UNSUPPORTED: dict[str, str] = {
    "allOf": "merge the parts into one schema",
    "not": "list the allowed values instead",
    "if": "use anyOf over the cases",
    "then": "use anyOf over the cases",
    "else": "use anyOf over the cases",
    "dependentRequired": "make the fields required (nullable where optional)",
    "dependentSchemas": "use anyOf over the cases",
    "patternProperties": "declare the properties by name",
    "unevaluatedProperties": "declare the properties by name",
    "propertyNames": "declare the properties by name",
    "minProperties": "declare the properties by name",
    "maxProperties": "declare the properties by name",
    "unevaluatedItems": "describe the items with 'items'",
    "contains": "describe the items with 'items'",
    "minContains": "describe the items with 'items'",
    "maxContains": "describe the items with 'items'",
    "uniqueItems": "check uniqueness after parsing",
    "prefixItems": "use an object with named fields instead of a tuple",
    "minLength": "use 'pattern' with a bounded repetition, or check the length after parsing",
    "maxLength": "use 'pattern' with a bounded repetition, or check the length after parsing",
}

# The string formats OpenAI's strict mode accepts.
_OPENAI_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)

# Annotations that carry no constraint and that strict mode does not need.
_DROPPED = ("default", "examples", "discriminator", "$schema", "$id", "$comment", "readOnly")


def schema_name(schema: dict[str, Any], default: str = "output") -> str:
    """Return a ``response_format.json_schema.name`` from the schema's title.

    OpenAI requires ``^[a-zA-Z0-9_-]{1,64}$``; other characters become ``_``.
    """
    title = schema.get("title")
    if isinstance(title, str):
        name = _NAME_BAD_CHARS.sub("_", title.strip()).strip("_")[:64]
        if name:
            return name
    return default


def _children(node: dict[str, Any]) -> list[tuple[str, Any]]:
    """Return (path segment, subschema) for every subschema directly under ``node``."""
    out: list[tuple[str, Any]] = []
    for key in ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas"):
        members = node.get(key)
        if isinstance(members, dict):
            out.extend((f"{key}/{name}", sub) for name, sub in members.items())
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        members = node.get(key)
        if isinstance(members, list):
            out.extend((f"{key}/{i}", sub) for i, sub in enumerate(members))
    for key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
        sub = node.get(key)
        if isinstance(sub, dict):
            out.append((key, sub))
    return out


def close_objects(schema: dict[str, Any]) -> dict[str, Any]:
    """Return a copy with ``additionalProperties: false`` on every object that has ``properties``.

    Only objects without an ``additionalProperties`` of their own are closed.

    Objects without ``properties`` (free-form ``dict``) are left open.
    """
    result = copy.deepcopy(schema)
    stack: list[Any] = [result]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        stack.extend(sub for _, sub in _children(node))
    return result


def _resolve(root: dict[str, Any], ref: str, where: str) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise UnsupportedConstraintError(
            f"OpenAI strict mode: $ref {ref!r} at {where} is not local; inline the schema "
            "or put it under $defs"
        )
    try:
        node = resolve_pointer(root, ref[1:])
    except PointerError:
        raise UnsupportedConstraintError(
            f"OpenAI strict mode: $ref {ref!r} at {where} points nowhere"
        ) from None
    if not isinstance(node, dict):
        raise UnsupportedConstraintError(
            f"OpenAI strict mode: $ref {ref!r} at {where} is not a schema object"
        )
    return node


def _nullable(sub: dict[str, Any]) -> dict[str, Any]:
    """Return ``sub`` widened so that ``null`` is also valid."""
    types = sub.get("type")
    if "enum" not in sub and isinstance(types, str):
        return sub if types == "null" else {**sub, "type": [types, "null"]}
    if "enum" not in sub and isinstance(types, list):
        return sub if "null" in types else {**sub, "type": [*types, "null"]}
    branches = sub.get("anyOf")
    if isinstance(branches, list) and set(sub) <= {"anyOf", "description", "title"}:
        if any(isinstance(b, dict) and b.get("type") == "null" for b in branches):
            return sub
        return {**sub, "anyOf": [*branches, {"type": "null"}]}
    return {"anyOf": [sub, {"type": "null"}]}


def to_openai_strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Return the schema rewritten for OpenAI's strict structured outputs.

    * every object lists all its properties in ``required``; the ones that were optional
      become nullable (``type: [T, "null"]`` or ``anyOf`` with ``null``);
    * every object gets ``additionalProperties: false``;
    * ``const`` becomes a one-value ``enum``, a one-part ``allOf`` is inlined, a discriminated
      ``oneOf`` becomes ``anyOf``, ``$ref`` with sibling keywords is inlined, ``default`` and
      other annotations without a constraint are dropped;
    * the root must be an object.

    Raises:
        UnsupportedConstraintError: the schema needs something strict mode cannot express
            (the message names the keyword, where it is, and what to do instead).
    """
    root = copy.deepcopy(schema)
    if isinstance(root.get("$ref"), str):
        target = _resolve(root, root["$ref"], "#")
        merged = {**copy.deepcopy(target), **{k: v for k, v in root.items() if k != "$ref"}}
        root = merged
    if root.get("type") != "object":
        raise UnsupportedConstraintError(
            "OpenAI strict mode needs an object at the root of the JSON Schema, got "
            f"{_describe(root)}; wrap the value in a pydantic model (e.g. a field 'value'), "
            "or use a server that takes any schema: sglang, vllm, llamacpp"
        )
    _strict_node(root, root, "#", ref_stack=())
    _check_limits(root)
    return root


OPENAI_MAX_DEPTH = 10
OPENAI_MAX_PROPERTIES = 5000
OPENAI_MAX_ENUM_VALUES = 1000


def _check_limits(root: dict[str, Any]) -> None:
    """Check OpenAI's size limits: nesting depth, property count, enum values."""
    properties = enum_values = 0
    stack: list[tuple[Any, int, str]] = [(root, 1, "#")]
    while stack:
        node, depth, where = stack.pop()
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("properties"), dict):
            properties += len(node["properties"])
            if depth > OPENAI_MAX_DEPTH:
                raise UnsupportedConstraintError(
                    f"OpenAI strict mode allows {OPENAI_MAX_DEPTH} levels of nested objects; "
                    f"the object at {where} is at level {depth}; flatten the schema"
                )
        if isinstance(node.get("enum"), list):
            enum_values += len(node["enum"])
        nested = depth + 1 if isinstance(node.get("properties"), dict) else depth
        for key, sub in _children(node):
            level = 1 if key.startswith(("$defs/", "definitions/")) else nested
            stack.append((sub, level, f"{where}/{key}"))
    if properties > OPENAI_MAX_PROPERTIES:
        raise UnsupportedConstraintError(
            f"OpenAI strict mode allows {OPENAI_MAX_PROPERTIES} object properties in all; "
            f"this schema has {properties}"
        )
    if enum_values > OPENAI_MAX_ENUM_VALUES:
        raise UnsupportedConstraintError(
            f"OpenAI strict mode allows {OPENAI_MAX_ENUM_VALUES} enum values in all; this "
            f"schema has {enum_values}"
        )


def _describe(node: dict[str, Any]) -> str:
    if "type" in node:
        return f"type {node['type']!r}"
    for key in ("anyOf", "oneOf", "enum", "const", "$ref"):
        if key in node:
            return f"a schema with {key!r}"
    return "a schema without 'type'"


def _strict_node(node: Any, root: dict[str, Any], where: str, ref_stack: tuple[str, ...]) -> None:
    """Rewrite ``node`` in place (it is already a private copy)."""
    if not isinstance(node, dict):
        raise UnsupportedConstraintError(
            f"OpenAI strict mode: the boolean schema {node!r} at {where} is not supported; "
            "write out the schema"
        )
    discriminated = "discriminator" in node
    for key in _DROPPED:
        node.pop(key, None)
    for key, hint in _OPENAI_UNSUPPORTED.items():
        if key in node and not (key == "allOf" and _single_all_of(node)):
            raise UnsupportedConstraintError(
                f"OpenAI strict mode does not support {key!r} (at {where}): {hint}; or use a "
                "server that enforces full JSON Schema: sglang, vllm, llamacpp"
            )
    if _single_all_of(node):
        (part,) = node.pop("allOf")
        if not isinstance(part, dict):
            raise UnsupportedConstraintError(
                f"OpenAI strict mode: allOf at {where} must hold a schema object"
            )
        for k, v in part.items():
            node.setdefault(k, v)
    # Branches told apart by a discriminator are disjoint: anyOf means the same.
    if "oneOf" in node and not discriminated:
        raise UnsupportedConstraintError(
            f"OpenAI strict mode does not support 'oneOf' (at {where}): use anyOf "
            "(a pydantic discriminated union is rewritten for you)"
        )
    if "const" in node:
        node["enum"] = [node.pop("const")]
    fmt = node.get("format")
    if fmt is not None and fmt not in _OPENAI_FORMATS:
        raise UnsupportedConstraintError(
            f"OpenAI strict mode does not support format {fmt!r} (at {where}); supported: "
            f"{', '.join(sorted(_OPENAI_FORMATS))}; use 'pattern' instead"
        )
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1:
        if ref in ref_stack:
            raise UnsupportedConstraintError(
                f"OpenAI strict mode: recursive $ref {ref!r} at {where} has sibling keywords; "
                "move them into the referenced schema"
            )
        target = copy.deepcopy(_resolve(root, ref, where))
        del node["$ref"]
        for k, v in target.items():
            node.setdefault(k, v)
        _strict_node(node, root, where, (*ref_stack, ref))
        return
    if not (set(node) & {"type", "enum", "anyOf", "oneOf", "$ref", "properties"}):
        raise UnsupportedConstraintError(
            f"OpenAI strict mode needs a 'type' for every value; the schema at {where} accepts "
            "anything (an Any field or a free-form dict); give it a type"
        )
    types = node.get("type")
    is_object = types == "object" or (isinstance(types, list) and "object" in types)
    if is_object or "properties" in node:
        _strict_object(node, root, where, ref_stack)
    items = node.get("items")
    if items is not None:
        _strict_node(items, root, f"{where}/items", ref_stack)
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list):
            for i, branch in enumerate(branches):
                _strict_node(branch, root, f"{where}/{key}/{i}", ref_stack)
    if "oneOf" in node:
        node["anyOf"] = node.pop("oneOf")
    for key in ("$defs", "definitions"):
        defs = node.get(key)
        if isinstance(defs, dict):
            for name, sub in defs.items():
                _strict_node(sub, root, f"#/{key}/{name}", ref_stack)


def _single_all_of(node: dict[str, Any]) -> bool:
    parts = node.get("allOf")
    return isinstance(parts, list) and len(parts) == 1


def _strict_object(
    node: dict[str, Any], root: dict[str, Any], where: str, ref_stack: tuple[str, ...]
) -> None:
    properties = node.get("properties")
    extra = node.get("additionalProperties", False)
    if extra is not False:
        raise UnsupportedConstraintError(
            f"OpenAI strict mode needs additionalProperties false on every object; the object "
            f"at {where} allows extra keys (a dict[str, ...] field?); give it named properties"
        )
    if not isinstance(properties, dict) or not properties:
        raise UnsupportedConstraintError(
            f"OpenAI strict mode needs named properties on every object; the object at {where} "
            "has none (a free-form dict?); declare its fields"
        )
    required = node.get("required", [])
    if not isinstance(required, list):
        required = []
    new_props: dict[str, Any] = {}
    for name, sub in properties.items():
        _strict_node(sub, root, f"{where}/properties/{name}", ref_stack)
        new_props[name] = sub if name in required else _nullable(sub)
    node["properties"] = new_props
    node["required"] = list(properties)
    node["additionalProperties"] = False
