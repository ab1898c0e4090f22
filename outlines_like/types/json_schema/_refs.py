"""``$ref`` resolution and ``allOf`` merging: a schema flattened into one dict."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from outlines_like.errors import InvalidConstraintError
from outlines_like.types.json_schema._base import (
    ANNOTATIONS,
    CLOSED,
    EXTRA_FORMATS,
    EXTRA_PATTERNS,
    NEVER,
    TYPES,
    UNMERGED,
    ConverterBase,
    canonical,
)
from outlines_like.types.json_schema._logic import (
    NOT_STRINGS,
    conditional,
    dependencies,
    negate,
    one_of_types,
)
from outlines_like.types.json_schema.pointer import PointerError, resolve_pointer

# The keywords :meth:`RefsMixin.rewrites` reads.
_REWRITTEN: Final = frozenset(
    {"not", "if", "dependentRequired", "dependentSchemas", "dependencies", "oneOf"}
)

# The keywords :meth:`RefsMixin.upgrade` rewrites.
_UPGRADED: Final = frozenset(
    {"exclusiveMinimum", "exclusiveMaximum", "items", "additionalItems", "const", "uniqueItems"}
)


class RefsMixin(ConverterBase):
    """Follows ``$ref`` and merges ``allOf`` into the schema that holds them."""

    def resolve(self, ref: str, path: str) -> tuple[Any, str]:
        """Return the schema a local JSON pointer names, and its path (kept per ``ref``)."""
        if type(ref) is str:
            known = self.resolved.get(ref)
            if known is None:
                known = self.resolved[ref] = self.resolve_once(ref, path)
            return known
        return self.resolve_once(ref, path)

    def resolve_once(self, ref: str, path: str) -> tuple[Any, str]:
        """:meth:`resolve` itself (``path`` only names where an error is)."""
        if not isinstance(ref, str) or not (ref == "" or ref.startswith("#")):
            raise self.invalid(
                path, f"$ref {ref!r} is not a local JSON pointer (only '#...' refs resolve)"
            )
        pointer = ref[1:] if ref.startswith("#") else ref
        if pointer and not pointer.startswith("/"):
            found = self.anchor(self.root, pointer, "")
            if found is None:
                raise self.invalid(path, f"$ref {ref!r}: no $anchor {pointer!r} in the schema")
            pointer = found
        try:
            node = resolve_pointer(self.root, pointer)
        except PointerError as exc:
            raise self.invalid(
                path, f"$ref {ref!r} points to nothing (no {exc.args[0]!r})"
            ) from None
        return node, "#" + pointer

    def anchor(self, node: Any, name: str, pointer: str) -> str | None:
        """The JSON pointer of the subschema whose ``$anchor`` is ``name`` (document order)."""
        children: Iterable[tuple[str, Any]]
        if isinstance(node, dict):
            if pointer and "$id" in node:
                return None  # another resource: its anchors are not this document's
            if node.get("$anchor") == name:
                return pointer
            children = node.items()
        elif isinstance(node, list):
            children = ((str(i), v) for i, v in enumerate(node))
        else:
            return None
        for key, child in children:
            if key in ("const", "enum", "examples", "default"):
                continue  # values, not schemas
            found = self.anchor(
                child, name, f"{pointer}/{key.replace('~', '~0').replace('/', '~1')}"
            )
            if found is not None:
                return found
        return None

    def flatten(
        self, schema: Any, path: str, refs: list[str], seen: tuple[str, ...]
    ) -> dict[str, Any]:
        """Inline ``$ref`` and ``allOf`` at the top of ``schema`` into one dict.

        The refs followed are appended to ``refs`` (for the recursion bound). The dict is the
        caller's own, but its values are shared with every other call on the same schema (a
        cached result): take keywords out of it, never change a value in place.
        """
        if schema is True:
            return {}
        if schema is False:
            return {NEVER: True}
        if not isinstance(schema, dict):
            raise self.invalid(path, f"a schema must be an object or a boolean, not {schema!r}")
        key = (id(schema), seen)
        known = self.flat_cache.get(key)
        if known is None:
            start = len(refs)
            flat = self.flatten_once(schema, path, refs, seen)
            self.flat_cache[key] = (schema, flat, refs[start:])
        else:
            refs.extend(known[2])
            flat = known[1]
        return dict(flat)  # callers take keywords out of the top level

    def flatten_once(
        self, schema: dict[str, Any], path: str, refs: list[str], seen: tuple[str, ...]
    ) -> dict[str, Any]:
        """:meth:`flatten` itself; its result depends on the schema and ``seen`` only.

        ``path`` only names where an error is, and nothing below warns, so the result is
        kept (:attr:`flat_cache`) by the schema's identity: merged schemas hold the same
        sub-schemas again and again, and the regex and the grammar converters of one
        schema flatten the same ones.
        """
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
        parts.extend(self.rewrites(node, schema, path, seen))
        result = node
        for part in parts:
            result = self.merge(result, part, path)
        return result

    def rewrites(
        self, node: dict[str, Any], schema: dict[str, Any], path: str, seen: tuple[str, ...]
    ) -> list[dict[str, Any]]:
        """Take ``not``, ``if``, dependencies and ``oneOf`` of types out of ``node`` (``_logic``).

        They come back as schemas to merge into it. What cannot be rewritten stays in ``node``,
        to be reported as not enforced.
        """

        def flat(sub: Any, where: str) -> dict[str, Any]:
            return self.flatten(sub, where, [], seen)

        parts: list[dict[str, Any]] = []
        if node.keys().isdisjoint(_REWRITTEN):
            return parts
        if "not" in node:
            negated = negate(flat(node["not"], path + "/not"), flat, path + "/not")
            if negated is not None:
                del node["not"]
                parts.append(negated)
        if "if" in node:
            then, otherwise = schema.get("then", True), schema.get("else", True)
            union = conditional(node, then, otherwise, flat, path)
            if union is not None:
                del node["if"]
                parts.append(union)
        if "oneOf" in node:
            types = one_of_types(node["oneOf"], flat, path)
            if types is not None:
                del node["oneOf"]
                parts.append(types)
        unions = dependencies(node)
        if unions is not None:
            for key in ("dependentRequired", "dependentSchemas", "dependencies"):
                node.pop(key, None)
            parts.extend(unions)
        return parts

    def upgrade(self, schema: dict[str, Any], path: str) -> dict[str, Any]:
        """Copy ``schema`` without annotations, older-draft spellings rewritten to 2020-12."""
        node = {k: v for k, v in schema.items() if k not in ANNOTATIONS}
        if node.keys().isdisjoint(_UPGRADED) and "not" not in node:
            return node
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
            node[NEVER] = True
        return node

    @staticmethod
    def intersect_enums(a: Any, b: list[Any], path: str) -> list[Any]:
        if a is None:
            return b
        if not isinstance(a, list):
            raise InvalidConstraintError(f"invalid JSON Schema at {path}: enum must be a list")
        keys = {canonical(v) for v in b}
        return [v for v in a if canonical(v) in keys]

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
                    extra = EXTRA_PATTERNS if key == "pattern" else EXTRA_FORMATS
                    out[extra] = [*out.get(extra, []), value]
            elif key in (EXTRA_PATTERNS, EXTRA_FORMATS, NOT_STRINGS):
                out[key] = [*mine, *value]
            elif key == "multipleOf":
                out[key] = lcm_step(mine, value)
            elif key in ("minProperties", "minContains"):
                out[key] = max(mine, value)
            elif key in ("maxProperties", "maxContains"):
                out[key] = min(mine, value)
            elif key == "uniqueItems":
                out[key] = bool(mine) or bool(value)
            elif key == "propertyNames":
                out[key] = {"allOf": [mine, value]}
            elif key == CLOSED:
                out[key] = True
            elif key == UNMERGED:
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
        for key in ("contains", "patternProperties"):
            if key in a and key in b and a[key] != b[key]:
                out[UNMERGED] = [*out.get(UNMERGED, []), key]
        object_keys = {"properties", "additionalProperties", "patternProperties", "propertyNames"}
        if any(
            "patternProperties" in one and object_keys & other.keys()
            for one, other in ((a, b), (b, a))
        ):  # keys from one side's patterns would skip the other side's object keywords
            out[UNMERGED] = [*out.get(UNMERGED, []), "patternProperties"]
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
        return [t for t in TYPES if t in both]


def lcm_step(a: float, b: float) -> float:
    """The smallest positive number both ``multipleOf`` steps divide (decimal arithmetic)."""
    import decimal
    import math

    da, db = decimal.Decimal(repr(a)), decimal.Decimal(repr(b))
    scale = max(
        -int(da.normalize().as_tuple().exponent), -int(db.normalize().as_tuple().exponent), 0
    )
    ia, ib = int(da.scaleb(scale)), int(db.scaleb(scale))
    both = decimal.Decimal(math.lcm(ia, ib)).scaleb(-scale)
    return int(both) if both == both.to_integral_value() else float(both)
