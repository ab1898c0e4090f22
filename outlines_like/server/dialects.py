"""Reading a request's constraint, whatever server dialect wrote it, into one term.

The reference server takes every dialect of DESIGN section 4, so a client that believes it
talks to SGLang, vLLM (new ``structured_outputs`` or old ``guided_*``), llama.cpp or OpenAI
gets its constraint enforced:

==========================  ===================================================
field                       term
==========================  ===================================================
``regex`` (SGLang)           ``Regex``
``ebnf`` (SGLang)            ``CFG`` (EBNF)
``json_schema`` (SGLang: JSON text; llama.cpp: object)  ``JsonSchema``
``grammar`` (llama.cpp GBNF, or Lark)   ``CFG``
``structured_outputs``      ``{regex | choice | json | grammar | json_object}``
``guided_regex`` ...        ``guided_regex | guided_choice | guided_json | guided_grammar``
``response_format``         ``json_schema`` -> ``JsonSchema``; ``json_object`` -> ``JsonObject``
                            (or ``JsonSchema`` when llama.cpp's ``schema`` is given)
==========================  ===================================================

Two constraints in one request are a conflict (a 400), never a silent pick.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any, Literal

from outlines_like.adapters.base import LENIENT_MARK
from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.server.grammar_check import check_directives
from outlines_like.types import CFG, Choice, JsonObject, JsonSchema, Regex, Term

__all__ = ["CONSTRAINT_FIELDS", "ConstraintSpec", "RequestError", "read_constraint"]

CONSTRAINT_FIELDS = frozenset(
    {
        "regex",
        "ebnf",
        "json_schema",
        "grammar",
        "structured_outputs",
        "guided_regex",
        "guided_json",
        "guided_choice",
        "guided_grammar",
        "response_format",
    }
)
"""Top-level request fields that may carry a constraint."""

# Accepted beside the constraint fields: the backend choice does not apply here, and the
# whitespace pattern is applied to guided_json (see _with_whitespace).
_IGNORED_GUIDED = frozenset({"guided_decoding_backend", "guided_whitespace_pattern"})
_STRUCTURED_KEYS = frozenset({"regex", "choice", "json", "grammar", "json_object"})
_STRUCTURED_OPTIONS = frozenset({"disable_any_whitespace", "whitespace_pattern", "backend"})


class RequestError(ValueError):
    """A request the server refuses (an OpenAI-style 4xx).

    Attributes:
        message: What is wrong, and where.
        param: The request field at fault, when one is.
        code: A short machine-readable code.
        status: The HTTP status.
    """

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = "invalid_request",
        status: int = 400,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status


@dataclasses.dataclass(frozen=True)
class ConstraintSpec:
    """The constraint of one request.

    Attributes:
        term: The constraint term.
        field: The request field it came from (for error messages), e.g.
            ``structured_outputs.regex``.
        key: A hashable cache key for the compiled constraint.
    """

    term: Term
    field: str
    key: tuple[str, str]


def _text(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise RequestError(f"{field} must be a non-empty string", param=field)
    return value


def _schema(value: object, field: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise RequestError(
                f"{field} is not valid JSON: {exc.msg} at character {exc.pos}", param=field
            ) from exc
    if isinstance(value, bool) or not isinstance(value, Mapping):
        raise RequestError(f"{field} must be a JSON Schema object", param=field)
    _check_schema_values(value, field)
    return dict(value)


_BOUND_KEYS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)
MAX_SCHEMA_BOUND = 10**15
"""Largest numeric bound a schema may set: beyond it float64 stops counting integers exactly."""


def _check_schema_values(schema: object, field: str) -> None:
    """Refuse numeric bounds the masker cannot enforce, and text that is not text.

    A schema sent as JSON text was decoded after the body's own surrogate check, so its
    strings are checked here again.
    """
    stack: list[object] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                if (
                    key in _BOUND_KEYS
                    and isinstance(value, (int, float))
                    and not isinstance(value, bool)
                    and not (math.isfinite(value) and abs(value) <= MAX_SCHEMA_BOUND)
                ):
                    raise RequestError(
                        f"{field}: {key} {value!r} is beyond what this server enforces (bounds "
                        f"must be finite and within +-{MAX_SCHEMA_BOUND:.0e})",
                        param=field,
                        code="invalid_constraint",
                    )
                stack.extend((key, value))
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                raise RequestError(
                    f"{field} holds a lone UTF-16 surrogate, which is not text",
                    param=field,
                    code="invalid_string",
                ) from None


def _json_schema(value: object, field: str) -> JsonSchema:
    """A schema field's term; the client's ``x-outlines-like-lenient`` mark makes it lenient."""
    schema = _schema(value, field)
    lenient = schema.pop(LENIENT_MARK, False) is True
    return JsonSchema(schema, lenient=lenient)


def _grammar(value: object, field: str, syntax: Literal["ebnf"] | None = None) -> CFG:
    text = _text(value, field)
    try:
        grammar = CFG(text, syntax) if syntax == "ebnf" else CFG(text)
    except (ValueError, TypeError) as exc:
        raise RequestError(f"{field}: {exc}", param=field) from exc
    try:
        check_directives(grammar)  # the rest of the checks run in the trial compile
    except (ValueError, InvalidConstraintError, UnsupportedConstraintError) as exc:
        raise RequestError(f"{field}: {exc}", param=field, code="invalid_constraint") from exc
    return grammar


def _choice(value: object, field: str) -> Choice:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise RequestError(f"{field} must be a non-empty list of strings", param=field)
    return Choice(value)


def _term(field: str, value: object) -> Term | None:
    """The term of one constraint field (``None``: the field asks for nothing)."""
    try:
        return _term_unchecked(field, value)
    except RequestError:
        raise
    except (InvalidConstraintError, UnsupportedConstraintError, ValueError, TypeError) as exc:
        raise RequestError(f"{field}: {exc}", param=field, code="invalid_constraint") from exc


def _term_unchecked(field: str, value: object) -> Term | None:
    if field in ("regex", "structured_outputs.regex", "guided_regex"):
        return Regex(_text(value, field))
    if field == "ebnf":
        return _grammar(value, field, "ebnf")
    if field in ("grammar", "structured_outputs.grammar", "guided_grammar"):
        return _grammar(value, field)
    if field in ("json_schema", "structured_outputs.json", "guided_json"):
        return _json_schema(value, field)
    if field in ("structured_outputs.choice", "guided_choice"):
        return _choice(value, field)
    if field == "structured_outputs.json_object":
        if value is True:
            return JsonObject()
        if value in (False, None):
            return None
        raise RequestError(f"{field} must be a boolean", param=field)
    raise AssertionError(f"unhandled constraint field {field}")  # pragma: no cover


def _response_format(value: object) -> tuple[str, Term] | None:
    field = "response_format"
    if not isinstance(value, Mapping):
        raise RequestError("response_format must be an object", param=field)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        if value.get("schema") is not None:  # llama.cpp's extension
            return field + ".schema", _json_schema(value["schema"], field + ".schema")
        return field, JsonObject()
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, Mapping) or "schema" not in spec:
            raise RequestError(
                "response_format.json_schema must be an object with a 'schema'",
                param="response_format.json_schema",
            )
        return field + ".json_schema", _json_schema(
            spec["schema"], "response_format.json_schema.schema"
        )
    raise RequestError(
        f"response_format.type must be 'text', 'json_object' or 'json_schema', got {kind!r}",
        param="response_format.type",
    )


def read_constraint(body: Mapping[str, Any]) -> ConstraintSpec | None:
    """Read the constraint of a request body, in any dialect.

    Args:
        body: The decoded JSON request.

    Returns:
        The constraint, or ``None`` for free text.

    Raises:
        RequestError: A malformed constraint field, or two constraints at once.
    """
    found: list[tuple[str, Term]] = []
    for field in sorted(CONSTRAINT_FIELDS & body.keys()):
        value = body[field]
        if value is None:
            continue
        if field == "response_format":
            try:
                got = _response_format(value)
            except (InvalidConstraintError, UnsupportedConstraintError) as exc:
                raise RequestError(f"{field}: {exc}", param=field) from exc
            if got is not None:
                found.append(got)
            continue
        if field == "structured_outputs":
            if not isinstance(value, Mapping):
                raise RequestError("structured_outputs must be an object", param=field)
            unknown = set(value) - _STRUCTURED_KEYS - _STRUCTURED_OPTIONS
            if unknown:
                raise RequestError(
                    f"structured_outputs has unsupported keys {sorted(unknown)}; this server "
                    f"reads {sorted(_STRUCTURED_KEYS)}",
                    param=field,
                )
            for key in sorted(_STRUCTURED_KEYS & value.keys()):
                if value[key] is None:
                    continue
                name = f"structured_outputs.{key}"
                term = _term(name, value[key])
                if term is not None:
                    found.append((name, term))
            continue
        term = _term(field, value)
        if term is not None:
            found.append((field, term))
    if not found:
        return None
    if len(found) > 1:
        names = " and ".join(name for name, _ in found)
        raise RequestError(
            f"conflicting constraints: {names}; send one", param=found[1][0], code="conflict"
        )
    name, term = found[0]
    term = _with_whitespace(body, name, term)
    return ConstraintSpec(term, name, (type(term).__name__, repr(term)))


def _with_whitespace(body: Mapping[str, Any], name: str, term: Term) -> Term:
    """Apply vLLM's ``whitespace_pattern`` (``guided_whitespace_pattern`` before 0.12)."""
    options = body.get("structured_outputs")
    if name == "structured_outputs.json" and isinstance(options, Mapping):
        field, pattern = "structured_outputs.whitespace_pattern", options.get("whitespace_pattern")
    elif name == "guided_json":
        field, pattern = "guided_whitespace_pattern", body.get("guided_whitespace_pattern")
    else:
        return term
    if pattern is None or not isinstance(term, JsonSchema):
        return term
    return _term_with(field, term, _text(pattern, field))


def _term_with(field: str, term: JsonSchema, pattern: str) -> JsonSchema:
    try:
        return JsonSchema(term.schema, whitespace_pattern=pattern)
    except (InvalidConstraintError, ValueError, TypeError) as exc:
        raise RequestError(f"{field}: {exc}", param=field, code="invalid_constraint") from exc


def ignored_fields() -> frozenset[str]:
    """Dialect fields accepted beside the constraint fields.

    Backend choices do not apply here; ``guided_whitespace_pattern`` applies to ``guided_json``.
    """
    return _IGNORED_GUIDED
