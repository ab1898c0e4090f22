"""Streams: chat-completion chunks aggregated into one message, and JSON read as it grows.

- :class:`StreamAggregator` takes OpenAI ``chat.completion.chunk`` objects (openai SDK
  objects, dicts, or raw SSE ``data:`` lines) one by one, returns what each chunk added, and
  builds the final :class:`AggregatedMessage` per choice. :func:`aggregate_chunks` and
  :func:`aggregate_choices` do it for a whole stream.
- :func:`partial_json` closes an incomplete JSON prefix into the largest valid value;
  :func:`iter_partial` yields partial objects as a structured answer streams in.

What the aggregator handles, seen on real servers (``tests/recordings/`` has the shapes):
content and reasoning deltas (``delta.reasoning`` on vLLM >= 0.11 and Ollama,
``delta.reasoning_content`` on SGLang, llama.cpp and DeepSeek) appended; ``<think>`` tags in
content split even when a tag is cut across chunks; tool calls bucketed by ``index`` (id and
name set once, arguments appended), several entries for one index in a chunk, a missing
``index`` (Ollama: each entry is a whole call, taken by order), one index reused for a new
call id, argument deltas sent as JSON objects (TGI), ``tool_calls`` sent as one object instead
of a list; usage taken from the last chunk that carries it (never summed); finish reasons
per choice; ``n > 1`` choices kept apart by ``choice.index``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types as _pytypes
import typing
import warnings
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from typing import Any, Union

import pydantic
import pydantic_core

from outlines_like._scan import JsonPrefixScanner
from outlines_like.errors import ParseError, ProviderResponseError, ToolCallParseWarning
from outlines_like.messages import (
    REASONING_FIELDS,
    Completion,
    ToolCall,
    Usage,
    new_call_id,
    read_field,
    read_usage,
)
from outlines_like.reasoning import ReasoningStream, resolve_reasoning
from outlines_like.tools.calls import parse_tool_calls
from outlines_like.tools.parser import ToolCallDelta

__all__ = [
    "AggregatedMessage",
    "ChoiceDelta",
    "RawToolCall",
    "StreamAggregator",
    "aaggregate_chunks",
    "aggregate_choices",
    "aggregate_chunks",
    "aiter_partial",
    "iter_partial",
    "partial_json",
    "read_usage",
]


# --------------------------------------------------------------------------- results


@dataclasses.dataclass(frozen=True)
class RawToolCall:
    """A streamed tool call as the server sent it, arguments text not decoded.

    Attributes:
        id: The call id (``None`` when the server sent none).
        name: The function name.
        arguments: The arguments text (dict-shaped deltas serialized to JSON).
        complete: Whether ``arguments`` is one whole JSON object.
    """

    id: str | None
    name: str | None
    arguments: str
    complete: bool


@dataclasses.dataclass(frozen=True)
class AggregatedMessage:
    """One choice of a stream, put back together.

    Attributes:
        index: The choice index.
        role: The role the server gave (``"assistant"``).
        content: The answer text, reasoning removed.
        reasoning: The reasoning, when any.
        tool_calls: The tool calls, arguments decoded (the best partial object when the
            stream ended inside them: see ``raw_tool_calls[i].complete``).
        raw_tool_calls: The same calls with their raw arguments text.
        finish_reason: The choice's finish reason, when the stream got that far.
        usage: The request's usage, from the last chunk that carried one.
        refusal: The model's refusal text (OpenAI ``delta.refusal``), when it refused.
    """

    index: int = 0
    role: str = "assistant"
    content: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCall] = dataclasses.field(default_factory=list)
    raw_tool_calls: list[RawToolCall] = dataclasses.field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    refusal: str | None = None

    def to_completion(self, raw: object = None) -> Completion:
        """The same, as the library's :class:`~outlines_like.messages.Completion`."""
        return Completion(
            text=self.content,
            reasoning=self.reasoning,
            tool_calls=tuple(self.tool_calls),
            finish_reason=self.finish_reason,
            usage=self.usage,
            raw=raw,
        )


@dataclasses.dataclass(frozen=True)
class ChoiceDelta:
    """What one chunk added to one choice.

    Attributes:
        index: The choice index.
        content: New answer text (reasoning and think tags removed; may be empty).
        reasoning: New reasoning text.
        tool_calls: New tool-call pieces, ``index`` being the call's position in the message.
        finish_reason: Set on the choice's last chunk.
    """

    index: int
    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None


# --------------------------------------------------------------------------- aggregation


@dataclasses.dataclass
class _Bucket:
    id: str | None = None
    name: str | None = None
    parts: list[str] = dataclasses.field(default_factory=list)
    obj: dict[str, Any] | None = None

    def finish(self, position: int) -> tuple[RawToolCall, ToolCall | None]:
        text = "".join(self.parts)
        arguments: dict[str, Any] = {}
        complete = True
        if text.strip():
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                complete = False
                try:
                    value = partial_json(text)
                except ParseError:
                    value = None
            if isinstance(value, dict):
                arguments = value
            elif value is not None:
                complete = False
        if self.obj is not None:
            arguments = {**arguments, **self.obj}
            if not text.strip():
                text = json.dumps(self.obj, ensure_ascii=False)
        raw = RawToolCall(self.id, self.name, text, complete)
        if not self.name:
            warnings.warn(
                f"streamed tool call #{position} has no function name; it was dropped "
                f"(arguments {text[:100]!r})",
                ToolCallParseWarning,
                stacklevel=4,
            )
            return raw, None
        return raw, ToolCall(self.id or new_call_id(position), self.name, arguments)


class _Choice:
    def __init__(self, index: int, think_open: bool, hold: bool) -> None:
        self.index = index
        self.role = "assistant"
        self.splitter = ReasoningStream(think_open=think_open, hold=hold)
        self.content: list[str] = []
        self.field_reasoning: list[str] = []
        self.refusal: list[str] = []
        self.buckets: list[_Bucket] = []
        self.by_index: dict[int, int] = {}
        self.by_id: dict[str, int] = {}
        self.finish_reason: str | None = None
        self.finished = False

    def _new_bucket(self) -> int:
        self.buckets.append(_Bucket())
        return len(self.buckets) - 1

    def tool_entry(self, entry: object) -> ToolCallDelta:
        server_index = read_field(entry, "index")
        call_id = read_field(entry, "id")
        call_id = call_id if isinstance(call_id, str) and call_id else None
        function = read_field(entry, "function") or {}
        name = read_field(function, "name")
        name = name if isinstance(name, str) and name else None
        args = read_field(function, "arguments")
        if args is None:
            args = read_field(function, "parameters")

        if not isinstance(server_index, int):
            # No index (Ollama): an entry with an id or a name starts a call, unless the id
            # is known; a bare continuation goes to the last call.
            if call_id is not None and call_id in self.by_id:
                b = self.by_id[call_id]
            elif call_id is not None or name is not None or not self.buckets:
                b = self._new_bucket()
            else:
                b = len(self.buckets) - 1
        else:
            known = self.by_index.get(server_index)
            if known is None:
                b = self._new_bucket()
            elif (
                call_id is not None
                and self.buckets[known].id is not None
                and call_id != self.buckets[known].id
            ):
                b = self.by_id.get(call_id, -1)
                if b < 0:  # the server reused an index for a new call
                    b = self._new_bucket()
            else:
                b = known
            self.by_index[server_index] = b
        bucket = self.buckets[b]
        first = bucket.id is None and bucket.name is None
        if call_id is not None and bucket.id is None:
            bucket.id = call_id
            self.by_id[call_id] = b
        if name is not None and bucket.name is None:
            bucket.name = name
        text = ""
        if isinstance(args, Mapping):
            bucket.obj = {**(bucket.obj or {}), **args}
            text = json.dumps(dict(args), ensure_ascii=False)
        elif isinstance(args, str):
            bucket.parts.append(args)
            text = args
        elif args is not None:
            raise ProviderResponseError(
                f"tool call arguments delta should be a string or an object, got "
                f"{type(args).__name__}: {args!r:.100}"
            )
        return ToolCallDelta(
            b,
            id=bucket.id if first else None,
            name=bucket.name if first else None,
            arguments=text,
        )

    def result(
        self, usage: Usage | None, *, think_open: bool, recover: bool, text_tools: bool
    ) -> AggregatedMessage:
        raws: list[RawToolCall] = []
        calls: list[ToolCall] = []
        for position, bucket in enumerate(self.buckets):
            raw, call = bucket.finish(position)
            raws.append(raw)
            if call is not None:
                calls.append(call)
        field = "".join(self.field_reasoning) or None
        reasoning, answer = resolve_reasoning(
            field,
            "".join(self.content),
            finish_reason=self.finish_reason,
            think_open=think_open,
            recover=recover,
            has_tool_calls=bool(calls),
        )
        if text_tools and not calls and "<tool_call>" in answer:
            calls, answer = parse_tool_calls(answer)
        return AggregatedMessage(
            index=self.index,
            role=self.role,
            content=answer,
            reasoning=reasoning,
            tool_calls=calls,
            raw_tool_calls=raws,
            finish_reason=self.finish_reason,
            usage=usage,
            refusal="".join(self.refusal) or None,
        )


def _as_chunk(chunk: object) -> object | None:
    """Accept an SDK chunk, a dict, or a raw SSE line; ``None`` for lines to skip."""
    if isinstance(chunk, bytes):
        chunk = chunk.decode("utf-8")
    if isinstance(chunk, str):
        line = chunk.strip()
        if not line or line.startswith(":") or line.startswith("event:"):
            return None
        if line.startswith("data:"):
            line = line[5:].strip()
        if line == "[DONE]":
            return None
        try:
            decoded: object = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ProviderResponseError(f"stream line is not JSON: {line[:200]!r}") from exc
        return decoded
    return chunk


class StreamAggregator:
    """Put a chat-completion stream back together, chunk by chunk.

    Example:
        >>> agg = StreamAggregator()
        >>> for chunk in [
        ...     {"choices": [{"index": 0, "delta": {"content": "<think>hm"}}]},
        ...     {"choices": [{"index": 0, "delta": {"content": "</think>Paris"}}]},
        ...     {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ... ]:
        ...     _ = agg.feed(chunk)
        >>> m = agg.result()
        >>> m.content, m.reasoning, m.finish_reason
        ('Paris', 'hm', 'stop')

    Args:
        think_open: The chat template opened ``<think>`` in the prompt (see
            :class:`~outlines_like.reasoning.ReasoningStream`).
        recover: Move an answer that the server put in the reasoning field back to the
            content (with a warning), as :func:`~outlines_like.reasoning.reasoning_from_message`.
        text_tool_calls: Also read ``<tool_call>`` blocks from the content when the server
            sent no structured tool calls (a server without a tool parser).
        hold_answer: Hold answer text in the per-chunk deltas until a ``</think>`` or the end
            of the stream shows that it is answer (a lone ``</think>`` turns the text before
            it into reasoning); the deltas then add up to :meth:`result`'s content exactly.
            The result is the same either way.
    """

    def __init__(
        self,
        *,
        think_open: bool = False,
        recover: bool = True,
        text_tool_calls: bool = False,
        hold_answer: bool = False,
    ) -> None:
        self._think_open = think_open
        self._hold = hold_answer
        self._recover = recover
        self._text_tools = text_tool_calls
        self._choices: dict[int, _Choice] = {}
        self.usage: Usage | None = None
        """The usage of the last chunk that carried one."""
        self.chunks = 0
        """How many chunks were fed."""

    def _choice(self, index: int) -> _Choice:
        choice = self._choices.get(index)
        if choice is None:
            choice = self._choices[index] = _Choice(index, self._think_open, self._hold)
        return choice

    def feed(self, chunk: object) -> list[ChoiceDelta]:
        """Take one chunk; return what it added to each choice it touched.

        Raises:
            ProviderResponseError: the chunk is an error object, or not readable.
        """
        data = _as_chunk(chunk)
        if data is None:
            return []
        self.chunks += 1
        error = read_field(data, "error")
        if error:
            message = read_field(error, "message") or error
            raise ProviderResponseError(f"the server sent an error in the stream: {message}")
        usage = read_usage(read_field(data, "usage"))
        if usage is not None:
            self.usage = usage
        out: list[ChoiceDelta] = []
        raw_choices: Any = read_field(data, "choices") or ()
        for position, raw_choice in enumerate(raw_choices):
            index = read_field(raw_choice, "index")
            choice = self._choice(index if isinstance(index, int) else position)
            out.append(self._feed_choice(choice, raw_choice))
        return out

    def _feed_choice(self, choice: _Choice, raw_choice: object) -> ChoiceDelta:
        delta = read_field(raw_choice, "delta")
        if delta is None:  # some servers send the final chunk with "message"
            delta = read_field(raw_choice, "message")
        if delta is None:  # a /v1/completions chunk: the text is on the choice
            text = read_field(raw_choice, "text")
            delta = {"content": text} if isinstance(text, str) else {}
        refusal = read_field(delta, "refusal")
        if isinstance(refusal, str) and refusal:
            choice.refusal.append(refusal)
        role = read_field(delta, "role")
        if isinstance(role, str) and role:
            choice.role = role
        field_piece = ""
        for name in REASONING_FIELDS:
            value = read_field(delta, name)
            if isinstance(value, str) and value:
                field_piece = value
                break
        content = read_field(delta, "content")
        content = content if isinstance(content, str) else ""
        if field_piece:
            choice.field_reasoning.append(field_piece)
        choice.content.append(content)
        r_delta, a_delta = choice.splitter.feed(content, reasoning=field_piece)
        tool_deltas: list[ToolCallDelta] = []
        entries: Any = read_field(delta, "tool_calls")
        if isinstance(entries, Mapping):
            entries = [entries]
        for entry in entries or ():
            tool_deltas.append(choice.tool_entry(entry))
        finish = read_field(raw_choice, "finish_reason")
        if isinstance(finish, str) and finish:
            choice.finish_reason = finish
            r_more, a_more = choice.splitter.finish()
            r_delta, a_delta = r_delta + r_more, a_delta + a_more
            choice.finished = True
        return ChoiceDelta(
            choice.index,
            content=a_delta,
            reasoning=r_delta,
            tool_calls=tuple(tool_deltas),
            finish_reason=choice.finish_reason if choice.finished else None,
        )

    def flush(self, index: int = 0) -> ChoiceDelta:
        """Release text held back for a choice whose stream ended without a finish reason."""
        choice = self._choice(index)
        r, a = choice.splitter.finish()
        return ChoiceDelta(index, content=a, reasoning=r)

    def result(self, index: int = 0) -> AggregatedMessage:
        """The message of one choice so far (complete once the stream has ended).

        Raises:
            KeyError: no chunk carried that choice.
        """
        if index not in self._choices:
            if not self._choices and index == 0:
                return AggregatedMessage(usage=self.usage)
            raise KeyError(f"no choice {index} in this stream; choices: {sorted(self._choices)}")
        return self._choices[index].result(
            self.usage,
            think_open=self._think_open,
            recover=self._recover,
            text_tools=self._text_tools,
        )

    def results(self) -> dict[int, AggregatedMessage]:
        """Every choice's message, by choice index."""
        return {i: self.result(i) for i in sorted(self._choices)}


def aggregate_chunks(chunks: Iterable[object], **options: bool) -> AggregatedMessage:
    """Aggregate a whole stream into choice 0's message (see :class:`StreamAggregator`)."""
    agg = StreamAggregator(**options)
    for chunk in chunks:
        agg.feed(chunk)
    return agg.result(0)


def aggregate_choices(chunks: Iterable[object], **options: bool) -> dict[int, AggregatedMessage]:
    """Aggregate a whole stream with ``n > 1`` choices: ``{choice index: message}``."""
    agg = StreamAggregator(**options)
    for chunk in chunks:
        agg.feed(chunk)
    return agg.results()


async def aaggregate_chunks(chunks: AsyncIterable[object], **options: bool) -> AggregatedMessage:
    """Async twin of :func:`aggregate_chunks` (for ``openai.AsyncOpenAI`` streams)."""
    agg = StreamAggregator(**options)
    async for chunk in chunks:
        agg.feed(chunk)
    return agg.result(0)


# --------------------------------------------------------------------------- partial JSON


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


class _PartialReader:
    """The core of :func:`iter_partial` / :func:`aiter_partial`: chunks in, values out."""

    def __init__(self, output_type: object) -> None:
        from outlines_like.types import parse

        self._parse = parse
        self._type = output_type
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
            return self._show(_final(self._parse, self._type, text[:end]))
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
        if self._end is not None:
            return []
        if not self._text.strip():
            raise ParseError("the stream ended before any JSON value", text=self._text)
        return self._show(_final(self._parse, self._type, self._text))


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

    Args:
        chunks: Text deltas of the answer (e.g. ``model.stream(prompt, Character)``).
        output_type: A pydantic model, dataclass, TypedDict, container type, ``dict``, or
            ``None`` for plain JSON values.

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
