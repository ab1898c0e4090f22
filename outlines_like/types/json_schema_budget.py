"""JSON Schema -> regex under a size budget, and ``$ref`` cycle detection: what routing measures.

:func:`bounded_json_schema_regex` is the regex path (``json_schema_to_regex``) with the regex's
size checked after every sub-schema, so a schema whose regex would run to megabytes stops at
the first construct past the budget (:class:`RegexBudgetExceeded` names it), in about the time
it takes to write that many characters. :func:`schema_is_recursive` tells, in time linear in the
schema, whether a ``$ref`` cycle is reachable from the root.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from outlines_like.errors import ConstraintTooLargeError, InvalidConstraintError
from outlines_like.types._terms import too_deep_at
from outlines_like.types.json_schema._base import FlatCache, check_whitespace_pattern
from outlines_like.types.json_schema._driver import _check_against_metaschema, _Converter
from outlines_like.types.json_schema._quick import metaschema, surely_valid
from outlines_like.types.json_schema._text import Rx

__all__ = [
    "RegexBudgetExceeded",
    "bounded_json_schema_regex",
    "check_depth",
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
