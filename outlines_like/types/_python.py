"""Python types -> terms, and terms -> regex.

The literal style is decided once, here:

* At the top level a value is written bare: ``int`` -> ``42``, ``date`` -> ``2024-01-31``,
  ``Literal["yes", "no"]`` -> ``yes``, a str ``Enum`` -> its value, ``bool`` -> ``true``.
* Inside containers and objects, values are JSON: ``list[str]`` -> ``["a","b"]``,
  ``list[date]`` -> ``["2024-01-31"]``, ``None`` -> ``null``, ``bool`` -> ``true``.

So ``bool`` is always JSON-style (``true``/``false``), and a top-level ``str`` is free text.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import functools
import inspect
import json
import typing
import uuid
from collections.abc import Mapping
from typing import Any, Literal, get_args, get_origin

from outlines_like.errors import UnsupportedConstraintError
from outlines_like.types import predefined
from outlines_like.types._schema_of import is_model_like, is_union, json_schema_of
from outlines_like.types._terms import (
    CFG,
    Alternatives,
    Choice,
    JsonObject,
    JsonSchema,
    Regex,
    Repeat,
    Sequence,
    String,
    Term,
    escape_regex,
)

__all__ = ["to_regex", "to_term"]

_SCALARS: dict[object, Regex] = {
    int: predefined.integer,
    float: predefined.number,
    bool: predefined.boolean,
    dt.date: predefined.date,
    dt.time: predefined.time,
    dt.datetime: predefined.datetime,
    uuid.UUID: Regex(predefined.UUID_PATTERN),
    decimal.Decimal: predefined.number,
}

_ACCEPTED = (
    "None or str (free text), int, float, bool, date, time, datetime, UUID, Decimal, "
    "Literal, Enum, "
    "Union/Optional, list/tuple/dict/set, a pydantic model, a dataclass, a TypedDict, a "
    "function, or a term (Regex, JsonSchema, CFG, Choice, ...)"
)


def _literal_term(values: tuple[object, ...]) -> Term:
    if all(isinstance(v, str) for v in values):
        return Choice(typing.cast(tuple[str, ...], values))
    return Alternatives(String(_bare(v)) for v in values)


def _bare(value: object) -> str:
    """The top-level text of a literal value: strings verbatim, the rest as JSON."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, str):
        return value
    return json.dumps(value)


@functools.lru_cache(maxsize=512)
def _cached_term(output_type: object) -> Term | None:
    return _to_term(output_type)


def to_term(output_type: object) -> Term | None:
    """Turn an output type into a term; ``None`` means free text (no constraint).

    A dict is read as a JSON Schema (``JsonSchema(output_type)``).

    Raises:
        UnsupportedConstraintError: ``output_type`` is not something we can constrain to.
    """
    if isinstance(output_type, Mapping):
        return JsonSchema(output_type)
    try:
        return _cached_term(output_type)
    except TypeError as exc:  # unhashable: build it every time
        if isinstance(exc, UnsupportedConstraintError):
            raise
        return _to_term(output_type)


def _to_term(tp: object) -> Term | None:
    if tp is None or tp is str:
        return None
    if isinstance(tp, (list, tuple, set, frozenset)):
        shown = repr(list(tp))[:80]
        raise UnsupportedConstraintError(
            f"{shown} is a list of values, not an output type; for one of these values pass "
            f"Literal[{', '.join(repr(v) for v in list(tp)[:4])}] (or Choice([...]) of strings)"
        )
    if isinstance(tp, Term):
        return tp
    if tp is dict or tp is typing.Dict:  # noqa: UP006 - the bare typing alias means any JSON too
        return JsonObject()
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin = get_origin(tp)
    if origin is Literal:
        return _literal_term(get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _literal_term(tuple(member.value for member in tp))
    if origin is typing.Annotated:
        # Metadata such as Field(ge=0, max_length=5) changes the valid values: pydantic's
        # schema carries it, so the value is JSON-style (a constrained str is quoted).
        return _schema_term(tp) if getattr(tp, "__metadata__", ()) else _to_term(get_args(tp)[0])
    if is_union(tp):
        args = get_args(tp)
        if any(isinstance(a, Term) for a in args):
            terms = [_to_term(a) for a in args]
            if any(t is None for t in terms):
                raise UnsupportedConstraintError("a union with a term cannot contain free text")
            return Alternatives(typing.cast(list[Term], terms))
        return _schema_term(tp)
    if is_model_like(tp) or origin in (list, tuple, dict, set, frozenset):
        return _schema_term(tp)
    if tp in (list, tuple, set, frozenset):
        return _schema_term(tp)
    if inspect.isfunction(tp) or inspect.ismethod(tp):
        return JsonSchema(tp)
    raise UnsupportedConstraintError(f"cannot use {tp!r} as an output type; accepted: {_ACCEPTED}")


def _without_unique_items(node: object) -> object:
    """Drop ``uniqueItems`` from a schema pydantic made for a Python type.

    pydantic writes ``uniqueItems: true`` for ``set``/``frozenset`` only, and reading a JSON
    array into a set drops repeats anyway: the answer is generated as a list and parsed into
    the set, so no engine needs to enforce uniqueness (few can).
    """
    if isinstance(node, dict):
        return {k: _without_unique_items(v) for k, v in node.items() if k != "uniqueItems"}
    if isinstance(node, list):
        return [_without_unique_items(v) for v in node]
    return node


def _schema_term(tp: object) -> JsonSchema:
    schema = json_schema_of(tp)
    if schema is None:
        raise UnsupportedConstraintError(
            f"cannot use {tp!r} as an output type: pydantic gives it no JSON Schema; "
            f"accepted: {_ACCEPTED}"
        )
    term = JsonSchema(typing.cast(dict[str, Any], _without_unique_items(schema)))
    object.__setattr__(term, "python_type", tp)
    return term


def _group(pattern: str) -> str:
    return f"({pattern})"


def _term_regex(term: Term) -> str:
    if isinstance(term, Regex):
        return term.pattern
    if isinstance(term, String):
        return escape_regex(term.value)
    if isinstance(term, Choice):
        return "|".join(escape_regex(item) for item in term.items)
    if isinstance(term, Sequence):
        return "".join(_group(_term_regex(t)) for t in term.terms)
    if isinstance(term, Alternatives):
        return "|".join(_group(_term_regex(t)) for t in term.terms)
    if isinstance(term, Repeat):
        inner = _group(_term_regex(term.term))
        if (term.min, term.max) == (0, None):
            return inner + "*"
        if (term.min, term.max) == (1, None):
            return inner + "+"
        if (term.min, term.max) == (0, 1):
            return inner + "?"
        if term.max is None:
            return f"{inner}{{{term.min},}}"
        if term.min == term.max:
            return f"{inner}{{{term.min}}}"
        return f"{inner}{{{term.min},{term.max}}}"
    if isinstance(term, JsonSchema):
        from outlines_like.types.json_schema import json_schema_to_regex

        return json_schema_to_regex(
            term.schema, whitespace_pattern=term.whitespace_pattern, lenient=term.lenient
        )
    if isinstance(term, JsonObject):
        raise UnsupportedConstraintError(
            "any JSON object (dict) has no regex: its nesting is unbounded; use a JSON Schema "
            "with bounded depth, or a grammar"
        )
    if isinstance(term, CFG):
        raise UnsupportedConstraintError(
            "a context-free grammar has no regex; use a server or engine that takes grammars"
        )
    raise UnsupportedConstraintError(f"no regex for term {term!r}")


@functools.lru_cache(maxsize=512)
def _cached_regex(term: Term) -> str:
    return _term_regex(term)


def to_regex(term_or_type: object) -> str:
    """Return the regex that a term or output type stands for.

    Raises:
        UnsupportedConstraintError: free text, a grammar, or ``dict`` (any JSON) has no regex.
        InvalidConstraintError: the JSON Schema cannot be turned into a regex.
    """
    term = to_term(term_or_type)
    if term is None:
        raise UnsupportedConstraintError(
            f"{term_or_type!r} is free text and has no regex; pass a constrained type"
        )
    return _cached_regex(term)
