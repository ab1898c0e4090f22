"""The terms of the constraint language: what an output must look like.

A term is an immutable, hashable value. Regex-shaped terms (``Regex``, ``String``, ``Choice``
and the combinators ``Sequence``, ``Alternatives``, ``Repeat``) compose with ``+`` and ``|``;
``JsonSchema``, ``CFG`` and ``JsonObject`` stand on their own.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, cast

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.types._schema_of import json_schema_of

__all__ = [
    "CFG",
    "Alternatives",
    "Choice",
    "JsonObject",
    "JsonSchema",
    "Regex",
    "Repeat",
    "Sequence",
    "String",
    "Term",
    "at_least",
    "at_most",
    "between",
    "either",
    "escape_regex",
    "exactly",
    "one_or_more",
    "optional",
    "zero_or_more",
]

_REGEX_SPECIALS = frozenset("\\.^$*+?{}[]|()")


def escape_regex(text: str) -> str:
    """Escape ``text`` so that it matches itself, using only escapes every regex engine reads."""
    out = []
    for ch in text:
        if ch in _REGEX_SPECIALS:
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        else:
            out.append(ch)
    return "".join(out)


class Term:
    """Base of every constraint term."""

    __slots__ = ()

    def __add__(self, other: Term | str) -> Sequence:
        return Sequence((self, _as_term(other)))

    def __radd__(self, other: Term | str) -> Sequence:
        return Sequence((_as_term(other), self))

    def __or__(self, other: Term | str) -> Alternatives:
        return Alternatives((self, _as_term(other)))

    def __ror__(self, other: Term | str) -> Alternatives:
        return Alternatives((_as_term(other), self))


def _as_term(value: object) -> Term:
    if isinstance(value, Term):
        return value
    if isinstance(value, str):
        return String(value)
    raise UnsupportedConstraintError(
        f"cannot combine a term with {type(value).__name__!s}; use a Term or a str"
    )


def _check_regex(pattern: str) -> None:
    try:
        re.compile(pattern)
    except RecursionError:  # re's parser recurses per group: ((((...)))) thousands deep
        raise InvalidConstraintError(f"regex {pattern[:60]!r}... nests too deep") from None
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise InvalidConstraintError(f"invalid regex {pattern!r}{where}: {exc.msg}") from exc


@dataclasses.dataclass(frozen=True, slots=True)
class Regex(Term):
    """Text that fully matches a regular expression (Python ``re`` syntax, no lookarounds).

    Args:
        pattern: The regular expression. It is checked at construction; an invalid one raises
            ``InvalidConstraintError`` naming the position.
    """

    pattern: str

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str):
            raise TypeError(f"Regex takes a str pattern, got {type(self.pattern).__name__}")
        _check_regex(self.pattern)


@dataclasses.dataclass(frozen=True, slots=True)
class String(Term):
    """Exactly this text."""

    value: str


@dataclasses.dataclass(frozen=True, slots=True)
class Choice(Term):
    """One of several fixed strings, taken verbatim."""

    items: tuple[str, ...]

    def __init__(self, items: Iterable[str]) -> None:
        values = tuple(items)
        if not values:
            raise InvalidConstraintError("Choice needs at least one item")
        for item in values:
            if not isinstance(item, str):
                raise TypeError(f"Choice items must be str, got {type(item).__name__}: {item!r}")
        object.__setattr__(self, "items", values)


@dataclasses.dataclass(frozen=True, slots=True)
class Sequence(Term):
    """The terms one after another."""

    terms: tuple[Term, ...]

    def __init__(self, terms: Iterable[Term | str]) -> None:
        flat: list[Term] = []
        for t in terms:
            term = _as_term(t)
            flat.extend(term.terms if isinstance(term, Sequence) else (term,))
        object.__setattr__(self, "terms", tuple(flat))


@dataclasses.dataclass(frozen=True, slots=True)
class Alternatives(Term):
    """Any one of the terms."""

    terms: tuple[Term, ...]

    def __init__(self, terms: Iterable[Term | str]) -> None:
        flat: list[Term] = []
        for t in terms:
            term = _as_term(t)
            flat.extend(term.terms if isinstance(term, Alternatives) else (term,))
        if not flat:
            raise InvalidConstraintError("Alternatives needs at least one term")
        object.__setattr__(self, "terms", tuple(flat))


@dataclasses.dataclass(frozen=True, slots=True)
class Repeat(Term):
    """The term repeated between ``min`` and ``max`` times (``max=None``: no upper bound)."""

    term: Term
    min: int
    max: int | None

    def __post_init__(self) -> None:
        if self.min < 0 or (self.max is not None and self.max < self.min):
            raise InvalidConstraintError(
                f"invalid repetition bounds {{{self.min},{self.max}}}: need 0 <= min <= max"
            )


def optional(term: Term | str) -> Repeat:
    """The term, or nothing."""
    return Repeat(_as_term(term), 0, 1)


def either(*terms: Term | str) -> Alternatives:
    """Any one of the terms."""
    return Alternatives(terms)


def zero_or_more(term: Term | str) -> Repeat:
    """The term any number of times."""
    return Repeat(_as_term(term), 0, None)


def one_or_more(term: Term | str) -> Repeat:
    """The term at least once."""
    return Repeat(_as_term(term), 1, None)


def exactly(count: int, term: Term | str) -> Repeat:
    """The term exactly ``count`` times."""
    return Repeat(_as_term(term), count, count)


def at_least(count: int, term: Term | str) -> Repeat:
    """The term ``count`` times or more."""
    return Repeat(_as_term(term), count, None)


def at_most(count: int, term: Term | str) -> Repeat:
    """The term at most ``count`` times."""
    return Repeat(_as_term(term), 0, count)


def between(low: int, high: int, term: Term | str) -> Repeat:
    """The term between ``low`` and ``high`` times, both included."""
    return Repeat(_as_term(term), low, high)


_MAX_SCHEMA_NESTING = 500  # json.dumps and json.loads recurse per level (limit ~1000)


def too_deep_at(document: Any, max_depth: int) -> str | None:
    """The JSON pointer of the first value nested more than ``max_depth`` deep, or ``None``.

    Iterative (a document nested thousands deep costs no recursion), linear in the document;
    a value's pointer is written only when it is the one returned.
    """
    # (value, depth, link): link is (parent's link, key or index, whether a key) or None
    stack: list[tuple[Any, int, Any]] = [(document, 0, None)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth, link = pop()
        if depth > max_depth:
            return _pointer(link)
        below = depth + 1
        pairs: Iterable[tuple[Any, Any]]
        if type(node) is dict or isinstance(node, Mapping):
            pairs, is_key = node.items(), True
        elif type(node) is list or isinstance(node, list):
            pairs, is_key = enumerate(node), False
        else:
            continue
        for key, value in pairs:
            kind = type(value)
            if (
                kind is dict
                or kind is list
                or (kind not in _SCALARS and isinstance(value, (Mapping, list)))
            ):
                push((value, below, (link, key, is_key)))
    return None


_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def _pointer(link: Any) -> str:
    """The JSON pointer of a :func:`too_deep_at` link."""
    tokens: list[str] = []
    while link is not None:
        link, key, is_key = link
        tokens.append(str(key).replace("~", "~0").replace("/", "~1") if is_key else str(key))
    return "#" + "".join("/" + token for token in reversed(tokens))


def _schema_from(source: object) -> tuple[dict[str, Any], object, str | None]:
    """(schema dict, python type or None, JSON text or None) for every ``JsonSchema`` source.

    The text is given when written here, for a dict: it is the one read back into the schema;
    writing the schema again would give the same text (JSON's values come back as written),
    and reading the text gives the schema (a key written twice, ``1`` and ``"1"``, is the
    last one both ways).
    """
    if isinstance(source, Mapping):
        deep = too_deep_at(source, _MAX_SCHEMA_NESTING)
        if deep is not None:
            raise InvalidConstraintError(
                f"the JSON Schema nests more than {_MAX_SCHEMA_NESTING} levels deep (at {deep})"
            )
        text = json.dumps(source)
        return json.loads(text), None, text
    if isinstance(source, str):
        try:
            value = json.loads(source)
        except RecursionError:
            raise InvalidConstraintError("the JSON Schema text nests too deep to read") from None
        except json.JSONDecodeError as exc:
            raise InvalidConstraintError(
                f"JSON Schema text is not valid JSON: {exc.msg} at line {exc.lineno} "
                f"column {exc.colno}"
            ) from exc
        if not isinstance(value, (dict, bool)):
            raise InvalidConstraintError("a JSON Schema must be a JSON object or a boolean")
        return (value if isinstance(value, dict) else ({} if value else {"not": {}})), None, None
    if isinstance(source, type) or callable(source):
        schema = json_schema_of(source)
        if schema is None:
            raise UnsupportedConstraintError(
                f"JsonSchema cannot take {source!r}: pass a dict, JSON text, a pydantic model, "
                "a dataclass, a TypedDict or a function"
            )
        return schema, source, None
    raise UnsupportedConstraintError(
        f"JsonSchema cannot take a {type(source).__name__}: pass a dict, JSON text, a pydantic "
        "model, a dataclass, a TypedDict or a function"
    )


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class JsonSchema(Term):
    """A JSON document valid under a JSON Schema.

    Args:
        source: A dict, JSON text, a pydantic model, a dataclass, a TypedDict or a function
            (its signature becomes an object schema).
        whitespace_pattern: Regex for the whitespace allowed between JSON tokens. ``None``
            is the compact default (``json.dumps(separators=(",", ":"))``); ``"[ ]?"`` widens it.
        lenient: Warn, instead of raising, when the schema uses a keyword the local engine
            cannot enforce.
    """

    source: object
    whitespace_pattern: str | None = None
    lenient: bool = False
    schema_json: str = dataclasses.field(init=False, repr=False)
    python_type: object = dataclasses.field(init=False, repr=False)
    _unread: list[dict[str, Any]] = dataclasses.field(init=False, repr=False)
    """The dict read from JSON text (or a dict's JSON) here, until ``schema`` hands it out."""

    def __post_init__(self) -> None:
        schema, python_type, text = _schema_from(self.source)
        if self.whitespace_pattern is not None:
            _check_regex(self.whitespace_pattern)
        if text is None:  # property order matters; a dict read from JSON has no cycle
            text = json.dumps(schema, check_circular=python_type is not None)
        object.__setattr__(self, "schema_json", text)
        object.__setattr__(self, "python_type", python_type)
        # JSON text and dicts were read back from JSON by _schema_from: the dict is what
        # json.loads(schema_json) gives, owned here, so the first ``schema`` hands it out
        # rather than reading the text again (a compile reads it once: ~20 us per 8 KB)
        object.__setattr__(self, "_unread", [schema] if python_type is None else [])

    @property
    def schema(self) -> dict[str, Any]:
        """The schema as a fresh dict (safe to modify)."""
        try:
            return self._unread.pop()  # once (pop is atomic: one thread gets it)
        except IndexError:
            return cast(dict[str, Any], json.loads(self.schema_json))

    def __getstate__(self) -> list[object]:
        # (as the dataclass's own, but the unread dict stays here: a pickle, which sends the
        # term to a compile worker, or a copy carries the text alone and reads it there)
        return [
            [] if field.name == "_unread" else getattr(self, field.name)
            for field in dataclasses.fields(self)
        ]

    def __setstate__(self, state: list[object]) -> None:
        for field, value in zip(dataclasses.fields(self), state, strict=True):
            object.__setattr__(self, field.name, value)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, JsonSchema)
            and self.schema_json == other.schema_json
            and self.whitespace_pattern == other.whitespace_pattern
            and self.lenient == other.lenient
        )

    def __hash__(self) -> int:
        return hash((self.schema_json, self.whitespace_pattern, self.lenient))


@dataclasses.dataclass(frozen=True, slots=True)
class JsonObject(Term):
    """Any JSON object (the ``dict`` output type, ``response_format: json_object``)."""


_EBNF_RULE = re.compile(r"^\s*[A-Za-z_][\w.-]*\s*::=", re.MULTILINE)


@dataclasses.dataclass(frozen=True, slots=True)
class CFG(Term):
    """Text in a context-free grammar.

    Args:
        definition: The grammar text, in Lark syntax (``start: ...``) or EBNF/GBNF
            (``root ::= ...``, the xgrammar and llama.cpp dialects).
        syntax: ``"lark"`` or ``"ebnf"``; detected from the text when not given.
    """

    definition: str
    syntax: Literal["lark", "ebnf"] = dataclasses.field(default="lark")

    def __init__(self, definition: str, syntax: Literal["lark", "ebnf"] | None = None) -> None:
        if not isinstance(definition, str):
            raise TypeError(f"CFG takes grammar text, got {type(definition).__name__}")
        if syntax is None:
            syntax = "ebnf" if _EBNF_RULE.search(definition) else "lark"
        if syntax not in ("lark", "ebnf"):
            raise ValueError(f"CFG syntax must be 'lark' or 'ebnf', got {syntax!r}")
        object.__setattr__(self, "definition", definition)
        object.__setattr__(self, "syntax", syntax)

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], syntax: Literal["lark", "ebnf"] | None = None
    ) -> CFG:
        """Read a grammar from a file (``.lark``, ``.ebnf`` or ``.gbnf``)."""
        text = pathlib.Path(path).read_text(encoding="utf-8")
        if syntax is None:
            suffix = os.fspath(path).rsplit(".", 1)[-1].lower()
            syntax = "lark" if suffix == "lark" else "ebnf" if suffix in ("ebnf", "gbnf") else None
        return cls(text, syntax)

    @property
    def lark(self) -> str:
        """The grammar in Lark syntax (converted from EBNF when needed)."""
        if self.syntax == "lark":
            return self.definition
        from outlines_like.types.grammars import ebnf_to_lark

        return ebnf_to_lark(self.definition)
