"""Text -> the Python value an output type promises."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any, Literal, get_args, get_origin

import pydantic

from outlines_like.errors import ParseError
from outlines_like.types._python import to_term
from outlines_like.types._schema_of import is_model_like, is_union
from outlines_like.types._terms import JsonObject, JsonSchema, Term

__all__ = ["parse"]


def _quote(text: str, limit: int = 200) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _fail(output_type: object, text: str, why: str) -> ParseError:
    name = getattr(output_type, "__name__", None) or repr(output_type)
    return ParseError(f"cannot read {_quote(text)} as {name}: {why}", text=text)


_INT = re.compile(r"-?(0|[1-9][0-9]*)")


def _parse_scalar(tp: type, text: str) -> object:
    stripped = text.strip()
    if tp is bool:
        lowered = stripped.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise _fail(tp, text, "expected true or false")
    if tp is int:
        if not _INT.fullmatch(stripped):
            raise _fail(tp, text, "expected an integer")
        return int(stripped)
    if tp is float:
        try:
            return float(json.loads(stripped))
        except (ValueError, TypeError) as exc:
            raise _fail(tp, text, "expected a number") from exc
    if tp is uuid.UUID:
        try:
            return uuid.UUID(stripped)
        except ValueError as exc:
            raise _fail(tp, text, "expected a UUID") from exc
    if tp is decimal.Decimal:
        try:
            return decimal.Decimal(stripped)
        except decimal.InvalidOperation as exc:
            raise _fail(tp, text, "expected a number") from exc
    try:
        if tp is dt.datetime:
            return dt.datetime.fromisoformat(stripped.replace("Z", "+00:00"))
        if tp is dt.date:
            return dt.date.fromisoformat(stripped)
        if tp is dt.time:
            return dt.time.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError as exc:
        raise _fail(tp, text, f"expected an ISO 8601 {tp.__name__}") from exc
    raise _fail(tp, text, "no parser for this type")


def _bare_matches(value: object, text: str) -> bool:
    if isinstance(value, str):
        return value == text
    return json.dumps(value) == text.strip()


def parse(output_type: object, text: str) -> Any:
    """Read ``text`` as the value ``output_type`` promises.

    ``int`` gives an int, ``date`` a date, a ``Literal`` its value, an ``Enum`` its member,
    a pydantic model an instance, a dataclass an instance, a TypedDict or ``dict`` a dict,
    containers their Python value; ``Regex`` and ``CFG`` give the text after checking a regex
    full match; ``JsonSchema`` gives the validated JSON value; ``None``/``str`` the text.

    Raises:
        ParseError: the text does not fit; the message quotes it.
    """
    if output_type is None or output_type is str:
        return text
    if output_type in (int, float, bool, dt.date, dt.time, dt.datetime, uuid.UUID, decimal.Decimal):
        return _parse_scalar(output_type, text)
    origin = get_origin(output_type)
    if origin is Literal:
        for value in get_args(output_type):
            if _bare_matches(value, text):
                return value
        raise _fail(output_type, text, f"expected one of {list(get_args(output_type))!r}")
    if isinstance(output_type, type) and issubclass(output_type, enum.Enum):
        for member in output_type:
            if _bare_matches(member.value, text):
                return member
        raise _fail(output_type, text, f"expected one of {[m.value for m in output_type]!r}")
    if output_type is dict or isinstance(output_type, JsonObject):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _fail(output_type, text, f"invalid JSON: {exc.msg}") from exc
        if not isinstance(value, dict):
            raise _fail(output_type, text, "expected a JSON object")
        return value
    if isinstance(output_type, Mapping):
        return _parse_json_schema(JsonSchema(output_type), text)
    if isinstance(output_type, JsonSchema):
        if output_type.python_type is not None:
            return parse(output_type.python_type, text)
        return _parse_json_schema(output_type, text)
    if isinstance(output_type, Term):
        from outlines_like.types._python import to_regex

        try:
            pattern = to_regex(output_type)
        except TypeError:
            return text  # a grammar: the server or the masker enforced it
        if re.fullmatch(pattern, text) is None:
            raise _fail(output_type, text, f"does not match the regex {pattern!r}")
        return text
    if (
        is_model_like(output_type)
        or is_union(output_type)
        or origin is not None
        or (isinstance(output_type, type) and output_type in (list, tuple, set, frozenset))
    ):
        return _parse_pydantic(output_type, text)
    if callable(output_type):
        term = to_term(output_type)
        if isinstance(term, JsonSchema):
            return _parse_json_schema(term, text)
    raise _fail(output_type, text, "no parser for this output type")


def _parse_pydantic(output_type: Any, text: str) -> Any:
    try:
        if isinstance(output_type, type) and issubclass(output_type, pydantic.BaseModel):
            return output_type.model_validate_json(text)
        value = pydantic.TypeAdapter(output_type).validate_json(text)
    except pydantic.ValidationError as exc:
        raise _fail(output_type, text, _short_errors(exc)) from exc
    return value


def _short_errors(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{loc}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _parse_json_schema(term: JsonSchema, text: str) -> Any:
    import jsonschema  # loaded on first use: importing the package stays light

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(term, text, f"invalid JSON: {exc.msg} at position {exc.pos}") from exc
    try:
        jsonschema.validate(value, term.schema)
    except jsonschema.ValidationError as exc:
        path = "/".join(str(p) for p in exc.absolute_path) or "<root>"
        raise _fail(term, text, f"at {path}: {exc.message}") from exc
    return value
