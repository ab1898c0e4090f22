"""Documents for the corpus benchmark: a seeded generator of valid JSON, mutations that break it.

hypothesis-jsonschema is not used: it cannot resolve recursive ``$ref`` (Kubernetes' JSON
schema props, pydantic trees), runs for minutes on large schemastore schemas, and 0.23 needs a
bridge to current Hypothesis. This generator walks the schema with a seeded ``random.Random``
(``$ref`` followed to a bounded depth, optional members taken at random, one ``anyOf``/``oneOf``
branch picked); every candidate is checked with ``jsonschema`` and its format checker, and
only the valid ones are kept. Invalid documents are seeded mutations of valid ones that
``jsonschema`` rejects.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import random
import uuid
from collections.abc import Iterator
from typing import Any

MAX_DOC_CHARS = 6000  # longer documents are dropped (walk time)
FORMATS = {
    "date-time": ["2024-12-08T14:00:00Z", "1999-01-31T23:59:59.5+01:00"],
    "date": ["2024-02-29", "1999-12-31"],
    "time": ["14:00:00Z", "08:30:06.25+02:00"],
    "email": ["ada@example.com", "joe.bloggs@mail.example.org"],
    "uri": ["https://example.com/a/b?c=1", "urn:isbn:0451450523"],
    "uri-reference": ["/a/b", "https://example.com/"],
    "uuid": [str(uuid.UUID(int=0x12345678123456781234567812345678))],
    "ipv4": ["192.168.0.1", "10.0.0.255"],
    "ipv6": ["::1", "2001:db8::ff00:42:8329"],
    "hostname": ["example.com", "a-b.example.org"],
    "duration": ["P3D", "PT1H30M"],
    "regex": ["^[a-z]+$"],
    "byte": ["aGVsbG8gd29ybGQ=", "AAECAwQ="],
    "int32": [],
    "int64": [],
}
GENERATOR = 2
"""The documents' version, part of the corpus cache's key (2: OpenAPI's ``byte`` format checked)."""
WORDS = ["alpha", "beta", "gamma", "delta", "Zoë", "x", "hello world", "a_b-c", "42", "naïve"]


class _Gen:
    """One seeded walk of a schema, producing a candidate document."""

    def __init__(self, root: Any, rng: random.Random, p_optional: float) -> None:
        self.root, self.rng, self.p_optional = root, rng, p_optional
        self.steps = 0

    def resolve(self, ref: str) -> Any:
        node = self.root
        for part in [p for p in ref.lstrip("#").split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node

    def value(self, schema: Any, depth: int) -> Any:
        self.steps += 1
        if self.steps > 5000 or depth > 40:
            raise RecursionError("document too deep")
        if schema is True or schema == {}:
            return self.rng.choice([1, "x", True, None])
        if not isinstance(schema, dict):
            raise ValueError("false schema")
        if "$ref" in schema and isinstance(schema["$ref"], str):
            target = self.resolve(schema["$ref"])
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **rest} if isinstance(target, dict) else target
            return self.value(schema, depth + 1)
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return copy.deepcopy(self.rng.choice(schema["enum"]))
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                branches = schema[key]
                # a deep document prefers non-recursive branches
                branch = self.rng.choice(branches if depth < 6 else branches[-1:])
                base = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                merged = {**base, **branch} if isinstance(branch, dict) else branch
                return self.value(merged, depth + 1)
        if isinstance(schema.get("allOf"), list):
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for sub in schema["allOf"]:
                if isinstance(sub, dict) and "$ref" in sub:
                    sub = self.resolve(sub["$ref"])
                if isinstance(sub, dict):
                    for k, v in sub.items():
                        if k == "properties":
                            merged["properties"] = {**merged.get("properties", {}), **v}
                        elif k == "required":
                            merged["required"] = [*merged.get("required", []), *v]
                        else:
                            merged.setdefault(k, v)
            return self.value(merged, depth + 1)
        types = schema.get("type")
        if isinstance(types, list):
            types = self.rng.choice(types) if types else None
        if types is None:
            types = self.implied_type(schema)
        return getattr(self, f"gen_{types}")(schema, depth)

    @staticmethod
    def implied_type(schema: dict[str, Any]) -> str:
        if any(k in schema for k in ("properties", "required", "additionalProperties")):
            return "object"
        if any(k in schema for k in ("items", "prefixItems", "minItems", "maxItems")):
            return "array"
        if any(k in schema for k in ("minLength", "maxLength", "pattern", "format")):
            return "string"
        if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "multipleOf")):
            return "number"
        return "string"

    def gen_null(self, schema: dict[str, Any], depth: int) -> Any:
        return None

    def gen_boolean(self, schema: dict[str, Any], depth: int) -> Any:
        return self.rng.random() < 0.5

    def _bounds(self, schema: dict[str, Any], default: tuple[float, float]) -> tuple[float, float]:
        lo, hi = default
        if isinstance(schema.get("minimum"), (int, float)):
            lo = schema["minimum"]
        if isinstance(schema.get("exclusiveMinimum"), (int, float)):
            lo = schema["exclusiveMinimum"] + 1
        if isinstance(schema.get("maximum"), (int, float)):
            hi = schema["maximum"]
        if isinstance(schema.get("exclusiveMaximum"), (int, float)):
            hi = schema["exclusiveMaximum"] - 1
        if hi < lo:
            hi = lo
        return lo, hi

    def gen_integer(self, schema: dict[str, Any], depth: int) -> Any:
        lo, hi = self._bounds(schema, (-1000, 100000))
        value = self.rng.randint(int(lo) if lo == int(lo) else int(lo) + 1, int(hi))
        step = schema.get("multipleOf")
        if isinstance(step, int) and step > 0:
            value -= value % step
        return value

    def gen_number(self, schema: dict[str, Any], depth: int) -> Any:
        if self.rng.random() < 0.4 or "multipleOf" in schema:
            return self.gen_integer(schema, depth)
        lo, hi = self._bounds(schema, (-1000.0, 1000.0))
        return round(self.rng.uniform(lo, hi), 3)

    def gen_string(self, schema: dict[str, Any], depth: int) -> Any:
        fmt = schema.get("format")
        if isinstance(fmt, str) and FORMATS.get(fmt):
            return self.rng.choice(FORMATS[fmt])
        if isinstance(schema.get("pattern"), str):
            return self.from_pattern(schema["pattern"])
        lo = int(schema.get("minLength", 0))
        hi = int(schema.get("maxLength", max(lo, 24)))
        text = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 4)))
        while len(text) < lo:
            text += self.rng.choice(WORDS)
        return text[: max(lo, min(hi, len(text)))]

    def from_pattern(self, pattern: str) -> str:
        from hypothesis import HealthCheck, find, settings
        from hypothesis import strategies as st

        # the simplest string the pattern searches for (deterministic)
        found: str = find(
            st.from_regex(pattern),
            lambda s: True,
            settings=settings(database=None, suppress_health_check=list(HealthCheck)),
        )
        return found

    def gen_array(self, schema: dict[str, Any], depth: int) -> Any:
        prefix = schema.get("prefixItems") or (
            schema["items"] if isinstance(schema.get("items"), list) else []
        )
        items = schema.get("items") if isinstance(schema.get("items"), (dict, bool)) else {}
        if items is False:
            items = None
        lo = int(schema.get("minItems", 0))
        hi = int(schema.get("maxItems", max(lo, 3)))
        n = self.rng.randint(lo, max(lo, min(hi, lo + (3 if depth < 4 else 0))))
        n = max(n, min(len(prefix), hi)) if prefix else n
        out = []
        for i in range(n):
            sub = prefix[i] if i < len(prefix) else items
            if sub is None:
                break
            out.append(self.value(sub, depth + 1))
        return out

    def gen_object(self, schema: dict[str, Any], depth: int) -> Any:
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        out = {}
        for name, sub in props.items():
            take = name in required or (depth < 8 and self.rng.random() < self.p_optional)
            if take:
                out[name] = self.value(sub, depth + 1)
        for name in required - set(out):
            extra = schema.get("additionalProperties", {})
            out[name] = self.value(extra if isinstance(extra, dict) else {}, depth + 1)
        lo = int(schema.get("minProperties", 0))
        extra = schema.get("additionalProperties")
        i = 0
        while len(out) < lo and extra is not False and i < 20:
            out.setdefault(
                f"extra{i}", self.value(extra if isinstance(extra, dict) else {}, depth + 1)
            )
            i += 1
        return out


def in_schema_order(doc: Any, schema: Any, root: Any, depth: int = 0) -> Any:
    """Return ``doc`` with every object's members in the order the schema declares them."""
    schema = _resolve(schema, root)
    if depth > 64:
        return doc
    if isinstance(doc, dict):
        declared: dict[str, Any] = {}
        for name, sub in _declared(schema, root):
            declared.setdefault(name, sub)
        extra = schema.get("additionalProperties") if isinstance(schema, dict) else None
        rank = {name: i for i, name in enumerate(declared)}
        keys = sorted(doc, key=lambda k: rank.get(k, len(rank)))
        return {
            k: in_schema_order(
                doc[k], declared.get(k, extra if isinstance(extra, dict) else {}), root, depth + 1
            )
            for k in keys
        }
    if isinstance(doc, list) and isinstance(schema, dict):
        prefix = schema.get("prefixItems") or []
        items = schema.get("items")
        out = []
        for i, v in enumerate(doc):
            sub = prefix[i] if i < len(prefix) else items if isinstance(items, dict) else {}
            out.append(in_schema_order(v, sub, root, depth + 1))
        return out
    return doc


def _resolve(schema: Any, root: Any) -> Any:
    for _ in range(32):
        if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
            return schema
        ref = schema["$ref"]
        if not ref.startswith("#"):
            return schema
        node = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return {}
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**node, **extra} if isinstance(node, dict) and extra else node
    return schema


def _declared(schema: Any, root: Any, depth: int = 0) -> list[tuple[str, Any]]:
    """(name, subschema) of the members a schema declares, in schema order."""
    schema = _resolve(schema, root)
    if not isinstance(schema, dict) or depth > 8:
        return []
    out: list[tuple[str, Any]] = []
    props = schema.get("properties")
    if isinstance(props, dict):
        out.extend(props.items())
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key) or []:
            out.extend(_declared(sub, root, depth + 1))
    return out


def _paths(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*path, i))


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    doc = copy.deepcopy(doc)
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return doc


def _other_type(value: Any) -> Any:
    if isinstance(value, bool):
        return "true"
    if isinstance(value, (int, float)):
        return "12"
    if isinstance(value, str):
        return 12
    if value is None:
        return 0
    if isinstance(value, list):
        return {"a": 1}
    return [1]


def mutations(doc: Any, rng: random.Random, n: int) -> Iterator[Any]:
    """Seeded candidate invalid documents derived from a valid one."""
    paths = list(_paths(doc))
    for _ in range(n):
        path, value = rng.choice(paths)
        kind = rng.randrange(5)
        if kind == 1 and isinstance(value, dict) and value:
            drop = rng.choice(list(value))
            yield _set(doc, path, {k: v for k, v in value.items() if k != drop})
        elif kind == 2 and isinstance(value, dict):
            yield _set(doc, path, {**value, "zz_unexpected": 1})
        elif kind == 3 and isinstance(value, str):
            yield _set(doc, path, value + "é#" * 300 if rng.random() < 0.5 else "zz-not-it")
        elif kind == 4 and isinstance(value, (int, float)) and not isinstance(value, bool):
            yield _set(doc, path, rng.choice([10**12, -(10**12), 0.5, value + 1]))
        else:
            yield _set(doc, path, _other_type(value))


def make_documents(
    schema: dict[str, Any], seed: int, n_valid: int, n_invalid: int, attempts: int = 40
) -> dict[str, list[str]]:
    """Return up to ``n_valid`` valid and ``n_invalid`` invalid compact texts, in schema order."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = cls(schema, format_checker=format_checker(cls))
    rng = random.Random(seed)
    valid: dict[str, Any] = {}
    for i in range(attempts):
        if len(valid) >= n_valid:
            break
        gen = _Gen(schema, rng, p_optional=(0.2, 0.5, 0.8)[i % 3])
        try:
            doc = gen.value(schema, 0)
        except (RecursionError, ValueError, KeyError, IndexError, TypeError, AttributeError):
            continue
        except Exception:  # hypothesis could not satisfy a pattern
            continue
        text = _text(doc, schema)
        if len(text) <= MAX_DOC_CHARS and validator.is_valid(doc):
            valid.setdefault(text, doc)
    invalid: dict[str, None] = {}
    for doc in list(valid.values())[::-1]:
        for bad in mutations(doc, rng, 12):
            text = _text(bad, schema)
            if len(invalid) < n_invalid and text not in invalid and not validator.is_valid(bad):
                invalid[text] = None
    return {"valid": list(valid), "invalid": list(invalid)}


def format_checker(validator_class: Any) -> Any:
    """The draft's format checker, with OpenAPI's ``byte`` (base64) as Kubernetes means it.

    jsonschema knows no ``byte`` (an unknown format passes everything); Kubernetes' schemas
    use it for base64 data (Secret data, certificate bundles), which its API server decodes
    strictly. The check here is Python's decoder (:func:`_is_base64`), not the masker's regex.
    """
    import jsonschema

    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(validator_class.FORMAT_CHECKER.checkers)
    checker.checks("byte")(_is_base64)
    return checker


def _is_base64(value: object) -> bool:
    """RFC 4648 base64: the standard alphabet, whole 4-character groups, at most two ``=``."""
    if not isinstance(value, str):
        return True  # (a format constrains strings only)
    body = value.rstrip("=")
    if len(value) % 4 or len(value) - len(body) > 2 or "=" in body:
        return False
    try:
        base64.b64decode(value, validate=True)  # (the alphabet; the padding is checked above)
    except (binascii.Error, ValueError):
        return False
    return True


def _text(doc: Any, schema: Any) -> str:
    ordered = in_schema_order(doc, schema, schema)
    return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)
