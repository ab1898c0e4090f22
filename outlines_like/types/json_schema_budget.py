"""JSON Schema -> regex under a size budget, and ``$ref`` cycle detection: what routing measures.

:func:`bounded_json_schema_regex` is the regex path (``json_schema_to_regex``) with the regex's
size checked after every sub-schema, so a schema whose regex would run to megabytes stops at
the first construct past the budget (:class:`RegexBudgetExceeded` names it), in about the time
it takes to write that many characters. :func:`schema_is_recursive` tells, in time linear in the
schema, whether a ``$ref`` cycle is reachable from the root; :func:`regex_surely_past`, also
linear, whether a floor under the regex's size already passes the budget (the attempt is then
skipped).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from outlines_like.errors import ConstraintTooLargeError, InvalidConstraintError
from outlines_like.types._terms import too_deep_at
from outlines_like.types.json_schema._base import (
    ANNOTATIONS,
    REF_ONLY,
    TYPES,
    FlatCache,
    check_whitespace_pattern,
)
from outlines_like.types.json_schema._driver import _check_against_metaschema, _Converter
from outlines_like.types.json_schema._quick import metaschema, surely_valid
from outlines_like.types.json_schema._text import INTEGER, NUMBER, STRING, Rx
from outlines_like.types.predefined import FORMAT_PATTERNS

__all__ = [
    "RegexBudgetExceeded",
    "bounded_json_schema_regex",
    "check_depth",
    "regex_surely_past",
    "schema_is_recursive",
]


class RegexBudgetExceeded(InvalidConstraintError):
    """The regex of a schema grew past the budget (``path`` is where it crossed it)."""

    def __init__(self, path: str, size: int, budget: int) -> None:
        super().__init__(
            f"the regex of the JSON Schema at {path} is {size:,} characters, over the budget "
            f"of {budget:,}"
        )
        self.path = path
        self.size = size


def check_depth(schema: Any, max_depth: int) -> None:
    """Raise :class:`ConstraintTooLargeError` when ``schema`` nests past ``max_depth``.

    The converters recurse once per level of the schema, so this runs first (iteratively,
    linear in the schema) and names the pointer where the nesting passes the limit.
    """
    deep = too_deep_at(schema, max_depth)
    if deep is not None:
        raise ConstraintTooLargeError(
            f"the JSON Schema nests more than {max_depth} levels deep at {deep} (pass a "
            "larger outlines_like.fsm.Budget(max_depth=...) or flatten the schema)",
            limit="depth",
            where=deep,
        )


def _options_checked(schema: Any, whitespace_pattern: str | None) -> dict[str, Any]:
    """Validate the arguments shared by both converters; return the schema as a dict."""
    if not isinstance(schema, Mapping):
        raise InvalidConstraintError(
            f"a JSON Schema must be a dict (or a boolean), not {type(schema).__name__}"
        )
    check_whitespace_pattern(whitespace_pattern)
    checked: dict[str, Any] = dict(schema)
    if not _passes_quickly(checked):
        _check_against_metaschema(checked)  # the full check, which says where it fails
    return checked


def _passes_quickly(schema: dict[str, Any]) -> bool:
    """Whether ``schema`` is valid under its metaschema, by the fastest exact check.

    :func:`~outlines_like.types.json_schema._quick.surely_valid` first (no ``jsonschema``
    import, one walk). Then ``jsonschema``: without ``$schema``, draft 7's validator is fast
    (it does not descend into ``$defs``) and its verdict suffices when it passes. A schema
    that declares draft 2020-12 is checked against the flat metaschema
    (:func:`~outlines_like.types.json_schema._quick.metaschema`): ``jsonschema`` walks the
    official one through seven ``$ref``s and a ``$dynamicRef`` at every sub-schema (1 s on the
    200 KB Kubernetes Deployment schema), the flat one several times faster. Other declared
    drafts are fast as they are. A schema that fails here gets the full check, which names
    where it fails.
    """
    if surely_valid(schema):
        return True
    import jsonschema

    declared = jsonschema.validators.validator_for(schema, default=None)
    if declared is None:
        validator: Any = jsonschema.Draft7Validator(jsonschema.Draft7Validator.META_SCHEMA)
    elif declared is jsonschema.Draft202012Validator:
        validator = jsonschema.Draft202012Validator(metaschema("draft2020-12"))
    else:
        validator = declared(declared.META_SCHEMA)
    return bool(validator.is_valid(schema))


# ------------------------------------------------------------------ the regex, under a budget


class _BudgetedConverter(_Converter):
    """The regex path, stopping as soon as a sub-schema's regex passes ``budget`` characters.

    With ``defer=True``, lenient warnings are kept in ``deferred`` (emitted by :meth:`emit`)
    rather than issued, so that a conversion that is abandoned warns nothing.
    """

    def __init__(
        self,
        root: dict[str, Any],
        budget: int,
        defer: bool = False,
        check: Callable[[str], None] | None = None,
        **options: Any,
    ):
        super().__init__(root, **options)
        self.budget = budget
        self.deferred: list[tuple[str, str, str]] | None = [] if defer else None
        self.check = check

    def work(self, path: str) -> None:
        if self.check is not None:
            self.check(path)

    def grown(self, size: int, path: str) -> None:
        if size > self.budget:
            raise RegexBudgetExceeded(path, size, self.budget)

    def unenforced(self, keyword: str, path: str, why: str = "") -> None:
        if self.deferred is not None and self.lenient:
            self.deferred.append((keyword, path, why))
        else:
            super().unenforced(keyword, path, why)

    def emit(self) -> None:
        """Issue the deferred warnings."""
        deferred, self.deferred = self.deferred or [], None
        for keyword, path, why in deferred:
            self.unenforced(keyword, path, why)

    def convert(self, schema: Any, path: str) -> Rx:
        regex = super().convert(schema, path)
        if regex is not None and len(regex) > self.budget:
            raise RegexBudgetExceeded(path, len(regex), self.budget)
        return regex


def bounded_json_schema_regex(
    schema: dict[str, Any],
    *,
    budget: int,
    whitespace_pattern: str | None = None,
    lenient: bool = False,
) -> str:
    """:func:`~outlines_like.types.json_schema.json_schema_to_regex`, within a size budget.

    The size is checked after every sub-schema, bottom-up, so a schema whose regex would be
    megabytes long stops at the first construct past the budget, in about the time it takes
    to write ``budget`` characters.

    Raises:
        RegexBudgetExceeded: The regex passed ``budget`` characters (an
            :class:`InvalidConstraintError` naming where).
        InvalidConstraintError: As ``json_schema_to_regex``.
    """
    schema = _options_checked(schema, whitespace_pattern)
    return _bounded_regex(schema, budget, whitespace_pattern, lenient, defer=False)[0]


def _bounded_regex(
    schema: dict[str, Any],
    budget: int,
    whitespace_pattern: str | None,
    lenient: bool,
    defer: bool,
    check: Callable[[str], None] | None = None,
    flat_cache: FlatCache | None = None,
) -> tuple[str, _BudgetedConverter]:
    """The bounded regex of a checked schema, and its converter (deferred warnings).

    ``check(pointer)`` runs once per sub-schema (a time budget's check); ``flat_cache`` is
    shared with another converter of the same schema.
    """
    converter = _BudgetedConverter(
        schema,
        budget,
        defer,
        check,
        whitespace_pattern=whitespace_pattern,
        lenient=lenient,
        max_recursion_depth=3,
        max_any_depth=2,
    )
    if flat_cache is not None:
        converter.flat_cache = flat_cache
    regex = converter.sub(schema, "#")
    if regex is None:
        raise InvalidConstraintError("the JSON Schema accepts no document (within the bounds)")
    return regex, converter


_NOT_SCHEMAS = frozenset({"$defs", "definitions", "enum", "const", "examples", "default"})
_SCALARS = frozenset({str, int, float, bool, type(None)})  # refs_in finds nothing in these


def schema_is_recursive(schema: Mapping[str, Any]) -> bool:
    """Whether a ``$ref`` cycle is reachable from the root of ``schema``.

    Each ``$ref`` target is a node; its edges are the ``$ref``s written inside it (outside
    nested ``$defs``/``definitions``, which only references reach). Linear in the schema.
    """
    edges: dict[str, list[str]] = {}

    def refs_in(node: Any, out: list[str]) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and (ref == "" or ref.startswith("#")):
                out.append("#" + ref.lstrip("#"))
            for key, value in node.items():
                if (type(value) is dict or type(value) is list) and key not in _NOT_SCHEMAS:
                    refs_in(value, out)
                elif type(value) not in _SCALARS and key not in _NOT_SCHEMAS:
                    refs_in(value, out)  # a subclass of dict or list
        elif isinstance(node, list):
            for value in node:
                if type(value) not in _SCALARS:
                    refs_in(value, out)

    resolver = _Converter(
        dict(schema),
        whitespace_pattern=None,
        lenient=True,
        max_recursion_depth=0,
        max_any_depth=0,
    )
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[tuple[str, int]] = [("#", 0)]
    while stack:
        node, index = stack.pop()
        if node not in edges:
            try:
                target = resolver.resolve(node, "#")[0]
            except InvalidConstraintError:
                target = None
            found: list[str] = []
            refs_in(target, found)
            edges[node] = found
            state[node] = 1
        if index < len(edges[node]):
            stack.append((node, index + 1))
            child = edges[node][index]
            if state.get(child) == 1:
                return True
            if child not in state:
                stack.append((child, 0))
        else:
            state[node] = 2
    return False


# ------------------------------------------------------------- a floor under the regex's size

# Keywords whose effect on the regex the floor below knows (with annotations and x- keys).
_FLOOR_KEYS = frozenset(
    {"type", "properties", "required", "items", "additionalProperties", "format"}
)
_SCALAR_FLOORS = {"null": 4, "boolean": 14, "string": 2, "integer": 1, "number": 1}
# without ``format`` (the other keys a floored node has leave scalars alone), a string,
# integer or number is the plain lexeme, exactly (see _format_floors for those with one)
_PLAIN_FLOORS = {
    **_SCALAR_FLOORS,
    "string": len(STRING),
    "integer": len(INTEGER),
    "number": len(NUMBER),
}


def _format_floors(fmt: Any) -> dict[str, int]:
    """The scalar floors of a node with ``format``: a string's is its regex, exactly.

    A known format is written ``"(?:FORMAT)"``; another string format is not enforced (the
    plain string, or the converter's error, which the grammar's converter raises too). The
    number converter does not read ``format`` (``int32``, ``double``): the plain lexemes.
    """
    if not isinstance(fmt, str):
        return {**_PLAIN_FLOORS, "string": _SCALAR_FLOORS["string"]}
    source = FORMAT_PATTERNS.get(fmt)
    string = len(STRING) if source is None else len(source) + 6
    return {**_PLAIN_FLOORS, "string": string}


def regex_surely_past(schema: dict[str, Any], budget: int, whitespace_pattern: str | None) -> bool:
    """Whether a checked schema's regex (no ``$ref`` cycle) is surely over ``budget`` characters.

    The bounded regex would then stop with :class:`RegexBudgetExceeded` after writing most of
    it (~1 ms on a Kubernetes object's metadata): the grammar is taken at once instead.

    A floor under the length of each sub-schema's regex, from the plainest sub-schemas only
    (``type``, ``properties``, ``required``, ``items``, ``additionalProperties``, ``format``,
    ``$ref``, annotations): an object whose first members are optional writes member ``i`` in
    each of the first ``i + 1`` alternatives (the regex grows with the square of the optional
    run), a free value is the any-value regex. Any other sub-schema may have no document
    (``None``) and adds nothing; an optional member that may have none is not counted, so the
    later members' positions stay floors. The walk goes where the converter surely goes, in
    its order (members up to a required one that may have no document, items, ``$ref``
    targets), and stops as soon as a floor passes the budget: ``True`` is exact (unless the
    converter raises another error on the way, which the grammar converter raises too),
    ``False`` only says that the floor stays within the budget. Each ``$ref`` target once.
    """
    floor = _Floor(schema, whitespace_pattern, budget)
    try:
        return floor.of(schema) > budget
    except _Past:
        return True


class _Past(Exception):
    """The floor of a sub-schema passed the budget."""


class _Floor:
    def __init__(self, schema: dict[str, Any], whitespace_pattern: str | None, budget: int):
        self.converter = _Converter(
            schema,
            whitespace_pattern=whitespace_pattern,
            lenient=True,
            max_recursion_depth=3,
            max_any_depth=2,
        )
        self.budget = budget
        self.member = 2 * len(self.converter.ws) + 1  # key ws : ws value, but the two
        self.any: int | None = None
        self.refs: dict[str, int] = {}

    def free(self) -> int:
        if self.any is None:
            self.any = len(self.converter.any_value(self.converter.max_any_depth))
        return self.any

    def of(self, node: Any) -> int:
        """A floor under the length of ``node``'s regex; -1: perhaps no document (None)."""
        if node is True:
            return self.free()
        if type(node) is not dict:
            return -1
        if "type" not in node:
            if "$ref" in node and node.keys() <= REF_ONLY:
                return self.ref(node["$ref"])
            return self.free() if node.keys() <= ANNOTATIONS else -1
        for key in node:
            if (
                key not in _FLOOR_KEYS
                and key not in ANNOTATIONS
                and (not key.startswith("x-") or key.startswith("x-outlines-like"))
            ):
                return -1  # (other x- keys are not read)
        declared = node["type"]
        types = [declared] if isinstance(declared, str) else declared
        if not isinstance(types, list) or not all(t in TYPES for t in types):
            return -1
        best = -1  # an alternation of the types' regexes: at least its longest part
        scalars = _format_floors(node["format"]) if "format" in node else _PLAIN_FLOORS
        for t in types:
            if t == "object":
                part = self.object(node)
            elif t == "array":
                part = self.array(node)
            else:
                part = scalars[t]
            best = max(best, part)
        if best > self.budget:
            raise _Past
        return best

    def ref(self, ref: Any) -> int:
        if type(ref) is not str:
            return -1
        known = self.refs.get(ref)
        if known is None:
            self.refs[ref] = -1  # (no cycle here: the schema is not recursive)
            try:
                target = self.converter.resolve(ref, "#")[0]
            except InvalidConstraintError:
                return -1
            known = self.refs[ref] = self.of(target)
        return known

    def array(self, node: dict[str, Any]) -> int:
        items = node.get("items", True)
        if isinstance(items, list):  # (a draft 4 tuple)
            return -1
        item = self.of(items)
        return 4 + 2 * max(item, 0)  # \[ item (sep item)* \], or \[\] without items

    def object(self, node: dict[str, Any]) -> int:
        properties = node.get("properties", {})
        required = node.get("required", [])
        if not isinstance(properties, dict) or not isinstance(required, list):
            return -1
        if not properties:
            if required:
                return -1
            additional = node.get("additionalProperties")
            if additional is False:
                return 4
            value = self.of(True if additional is None else additional)
            # extras only: a member, then (sep member)*: twice, its key at least ""
            return 4 if value < 0 else 4 + 2 * (2 + self.member + value)
        if not set(required) <= properties.keys():
            return -1
        total, position, first_required = 4, 0, None
        for name, sub in properties.items():
            value = self.of(sub)
            is_required = name in required
            if value < 0:
                if is_required:
                    return -1  # perhaps no member, then no object
                continue  # perhaps dropped: not counted, so later positions stay floors
            if is_required and first_required is None:
                first_required = position
            # member i is in the first min(i, first required) + 1 alternatives
            copies = min(position, position if first_required is None else first_required) + 1
            total += copies * (len(self.converter.member_key(name)) + self.member + value)
            position += 1
        return total
