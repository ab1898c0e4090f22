"""JSON read as it grows: partial values of a streamed structured answer.

:func:`partial_json` closes an incomplete JSON prefix into the largest valid value;
:func:`iter_partial` / :func:`aiter_partial` yield partial objects as a structured answer
streams in, then the validated whole.
"""

from __future__ import annotations

import functools
import json
import types as _pytypes
import typing
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from typing import Any, Union

import pydantic
import pydantic_core

from outlines_like._scan import JsonPrefixScanner
from outlines_like.errors import ParseError

__all__ = ["aiter_partial", "iter_partial", "partial_json"]


def partial_json(text: str) -> Any | None:
    """Close an incomplete JSON prefix into the largest valid value.

    Open strings are closed, open arrays and objects are closed, and a dangling key, colon,
    comma, or an unfinished number or literal is dropped::

        partial_json('{"name": "Al')           -> {"name": "Al"}
        partial_json('{"a": [1, 2, {"b": tr')  -> {"a": [1, 2, {}]}
        partial_json('{"a": 1, "b')            -> {"a": 1}

    Returns:
        The value, or ``None`` when the text holds no value yet (blank, ``"-"``, ``"tr"``).

    Raises:
        ParseError: the text cannot be the start of any JSON value, or has text after one.
    """
    scanner = JsonPrefixScanner()
    try:
        taken = scanner.feed(text)
    except ValueError as exc:
        raise ParseError(
            f"not the start of a JSON value: {exc}: {text[:200]!r}", text=text
        ) from exc
    if text[taken:].strip():
        raise ParseError(
            f"text after the JSON value at character {taken}: {text[taken : taken + 80]!r}",
            text=text,
        )
    if not text.strip():
        return None
    try:
        return pydantic_core.from_json(text[:taken], allow_partial="trailing-strings")
    except ValueError:
        return None  # a top-level value too short to mean anything yet ("-", "tr")


@functools.lru_cache(maxsize=256)
def _adapter(tp: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(tp)


_MISSING = object()


def _is_model(tp: object) -> bool:
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def _partial_value(tp: Any, value: Any) -> Any:
    """Validate what is there; return ``_MISSING`` when it cannot be validated yet."""
    if tp is Any or tp is None or tp is object:
        return value
    if _is_model(tp):
        return _partial_model(tp, value) if isinstance(value, dict) else _MISSING
    origin = typing.get_origin(tp)
    if origin in (Union, _pytypes.UnionType):
        for arg in typing.get_args(tp):
            if arg is type(None):
                if value is None:
                    return None
                continue
            got = _partial_value(arg, value)
            if got is not _MISSING:
                return got
        return _MISSING
    if origin in (list, tuple, set, frozenset) and isinstance(value, list):
        args = typing.get_args(tp)
        if args and _is_model(args[0]):
            items = [_partial_value(args[0], v) for v in value]
            return [v for v in items if v is not _MISSING]
    try:
        return _adapter(tp).validate_python(value, experimental_allow_partial="trailing-strings")
    except (pydantic.ValidationError, TypeError):
        return _MISSING
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError):
        return value  # a type pydantic cannot validate on its own: show the raw JSON value


def _partial_model(cls: type[pydantic.BaseModel], data: dict[str, Any]) -> pydantic.BaseModel:
    values: dict[str, Any] = {}
    for name, field in cls.model_fields.items():
        key = field.alias if isinstance(field.alias, str) and field.alias in data else name
        if key not in data:
            continue
        got = _partial_value(field.annotation, data[key])
        if got is not _MISSING:
            values[name] = got
    return cls.model_construct(**values)


def _partial_of(output_type: object, value: Any) -> Any:
    if output_type is None or output_type is dict or output_type is list:
        return value
    got = _partial_value(output_type, value)
    return value if got is _MISSING else got


def _partial_type(output_type: object) -> tuple[bool, object]:
    """Whether answers of ``output_type`` are JSON, and the type partial values take.

    JSON answers (models, containers, ``dict``, ``JsonSchema``) grow into partial values;
    any other answer (an int, a ``Literal``, a date, a ``Regex``, a grammar) has no partial
    value: only the whole is parsed, at the end.
    """
    if output_type is None:
        return True, None
    from outlines_like.types import JsonObject, JsonSchema, to_term

    term = to_term(output_type)
    if isinstance(term, JsonSchema):
        if isinstance(output_type, JsonSchema | Mapping):  # a schema: its Python type, if any
            return True, term.python_type
        return True, output_type
    if isinstance(term, JsonObject):
        return True, None
    return False, None


class _PartialReader:
    """The core of :func:`iter_partial` / :func:`aiter_partial`: chunks in, values out."""

    def __init__(self, output_type: object) -> None:
        from outlines_like.types import parse

        self._parse = parse
        self._json, self._type = _partial_type(output_type)
        self._output_type = output_type
        self._text = ""
        self._scanner = JsonPrefixScanner()
        self._end: int | None = None
        self._last: Any = _MISSING
        self._shown: Any = _MISSING

    def _show(self, value: Any) -> list[Any]:
        if _same(value, self._shown):
            return []
        self._shown = value
        return [value]

    def feed(self, chunk: str) -> list[Any]:
        if not chunk:
            return []
        if not self._json:
            self._text += chunk
            return []
        start = len(self._text)
        self._text += chunk
        text = self._text
        if self._end is not None:
            if chunk.strip():
                raise ParseError(
                    f"text after the JSON value: {text[self._end : self._end + 80]!r}", text=text
                )
            return []
        try:
            taken = self._scanner.feed(chunk)
        except ValueError as exc:
            raise ParseError(f"the stream is not JSON: {exc}: {text[:200]!r}", text=text) from exc
        if self._scanner.done:
            self._end = end = start + taken
            if text[end:].strip():
                raise ParseError(f"text after the JSON value: {text[end : end + 80]!r}", text=text)
            return self._show(_final(self._parse, self._output_type, text[:end]))
        if not text.strip():
            return []
        try:
            value = pydantic_core.from_json(text, allow_partial="trailing-strings")
        except ValueError:
            return []
        if value == self._last:
            return []
        self._last = value
        return self._show(_partial_of(self._type, value))

    def close(self) -> list[Any]:
        if not self._json:
            return [self._parse(self._output_type, self._text)]
        if self._end is not None:
            return []
        if not self._text.strip():
            raise ParseError("the stream ended before any JSON value", text=self._text)
        return self._show(_final(self._parse, self._output_type, self._text))


def iter_partial(chunks: Iterable[str], output_type: object = None) -> Iterator[Any]:
    """Yield the value of a streamed JSON answer as it grows, then the validated whole.

    Each time a chunk changes the value, a partial object is yielded: for a pydantic model,
    an instance built with ``model_construct`` from the fields present so far (each
    validated; a field that cannot be validated yet, e.g. half a ``Literal``, is left out, so
    reading a missing required field raises ``AttributeError``); for other types,
    ``TypeAdapter(...).validate_python(..., experimental_allow_partial=...)`` or, when that
    fails, the raw JSON value. A value equal to the previous one is not repeated. The last
    item is ``outlines_like.types.parse(output_type, text)``: fully validated.

    A model's ``stream_parse(prompt, T)`` is ``iter_partial(model.stream(prompt, T), T)``.

    Any output type ``parse`` takes works: JSON answers (a pydantic model, dataclass,
    TypedDict, container type, ``dict``, ``JsonSchema``) yield partial values as they grow;
    other answers (an int, a ``Literal``/``Enum``, a date, a ``Regex``, a ``CFG``) have no
    partial value and yield their parsed value once, at the end.

    Args:
        chunks: Text deltas of the answer (e.g. ``model.stream(prompt, Character)``).
        output_type: What the answer is, or ``None`` for plain JSON values.

    Raises:
        ParseError: the text is not JSON, the stream ended inside the value, or the complete
            value does not fit ``output_type``.
    """
    reader = _PartialReader(output_type)
    for chunk in chunks:
        yield from reader.feed(chunk)
    yield from reader.close()


async def aiter_partial(
    chunks: AsyncIterable[str], output_type: object = None
) -> AsyncIterator[Any]:
    """Async twin of :func:`iter_partial` (``aiter_partial(amodel.stream(prompt, T), T)``)."""
    reader = _PartialReader(output_type)
    async for chunk in chunks:
        for value in reader.feed(chunk):
            yield value
    for value in reader.close():
        yield value


def _same(a: Any, b: Any) -> bool:
    if b is _MISSING or type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:  # an __eq__ that cannot compare partial objects
        return False


def _final(parse: Any, output_type: object, text: str) -> Any:
    if output_type is None:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ParseError(
                f"the stream ended inside the JSON value: {text[-80:]!r}", text=text
            ) from exc
    return parse(output_type, text)
