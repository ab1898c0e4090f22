"""Chat-completion chunks put back together into one message per choice.

:class:`StreamAggregator` takes OpenAI ``chat.completion.chunk`` objects (openai SDK objects,
dicts, or raw SSE ``data:`` lines) one by one, returns what each chunk added, and builds the
final :class:`AggregatedMessage` per choice. It is the one stream reader of the package:
``model.stream`` is a view over it (``models._reader.StreamView``).

What it handles, seen on real servers (``tests/recordings/`` has the shapes): content and
reasoning deltas (``delta.reasoning`` on vLLM >= 0.11 and Ollama, ``delta.reasoning_content``
on SGLang, llama.cpp and DeepSeek, ``delta.thinking``) appended; ``<think>`` tags in content
split even when a tag is cut across chunks; tool calls bucketed by ``index`` (id and name set
once, arguments appended), several entries for one index in a chunk, a missing ``index``
(Ollama: each entry is a whole call, taken by order), one index reused for a new call id,
argument deltas sent as JSON objects (TGI), ``tool_calls`` sent as one object instead of a
list; usage taken from the last chunk that carries it (never summed); finish reasons per
choice; refusals; ``/v1/completions`` chunks (``choice.text``); ``n > 1`` choices kept apart
by ``choice.index``; an ``error`` event raises ``ProviderResponseError``.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import AsyncIterable, Iterable, Mapping
from typing import Any

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
from outlines_like.streaming.partial import partial_json
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
