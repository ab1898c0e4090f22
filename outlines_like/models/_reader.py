"""The one response reader: choices -> ``Completion``, stream chunks -> the same, then checks.

Shared by ``Model`` and ``AsyncModel`` (through ``ModelCore``) and by the local model:

- ``read_response``: every choice of a whole response, with refusals, content filters,
  reasoning split and tool calls read the same way for every server;
- ``StreamView``: what ``model.stream`` yields, a thin view over the aggregator that
  ``outlines_like.streaming.aggregate_chunks`` uses, so a streamed and a whole answer read
  the same;
- ``check_answers``: the one rule for answers under an output type, the same for every
  method (``__call__``, ``parse``, ``complete``, ``stream``, ``stream_parse``, ``batch``):

  ============================  ============================================================
  the answer                     what the caller gets
  ============================  ============================================================
  fits                           the answer
  fits, cut at ``max_tokens``    the answer, and a ``TruncatedOutputWarning``
  does not fit, cut              ``GenerationError(reason="length")``: raise ``max_tokens``
  does not fit, not cut          ``ConstraintViolationError`` (``verify="warn"``: the answer
                                 and a ``ConstraintViolationWarning``)
  ============================  ============================================================

  With ``verify=False`` nothing is checked; a cut answer still warns.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from outlines_like.errors import (
    ConstraintViolationError,
    ConstraintViolationWarning,
    GenerationError,
    ProviderResponseError,
    ReasoningRecoveredWarning,
    TruncatedOutputWarning,
)
from outlines_like.messages import REASONING_FIELDS, Completion, ToolCall, read_field, read_usage
from outlines_like.reasoning import reasoning_from_message, split_reasoning
from outlines_like.streaming import StreamAggregator
from outlines_like.tools.calls import parse_tool_calls, tool_calls_from_message
from outlines_like.types import Term
from outlines_like.types.verify import violation

__all__ = [
    "Sink",
    "StreamView",
    "Verdict",
    "Verify",
    "check_answers",
    "check_verify",
    "emit",
    "filtered",
    "misfit",
    "plain_answer",
    "read_response",
    "refused",
    "request_id",
]

Verify = Literal[True, False, "warn"]
"""How answers are checked against their output type: raise, don't check, or warn."""

Verdict = Literal["passed", "warned", "skipped"]
"""What the answer check found, when it did not raise (for logs and spans)."""

Sink = list[tuple[str, type[Warning]]]
"""Warnings kept to be issued later from the caller's thread (``batch`` runs in workers)."""


def emit(
    message: str, category: type[Warning], *, stacklevel: int, sink: Sink | None = None
) -> None:
    """Warn now (``stacklevel`` counted from the caller of ``emit``), or keep it in ``sink``."""
    if sink is not None:
        sink.append((message, category))
    else:
        warnings.warn(message, category, stacklevel=stacklevel + 1)


def check_verify(verify: object) -> Verify:
    """Validate a ``verify=`` argument.

    Raises:
        ValueError: it is not ``True``, ``False`` or ``"warn"``.
    """
    if verify is True or verify is False or verify == "warn":
        return verify
    raise ValueError(f"verify must be True, False or 'warn', got {verify!r}")


def misfit(term: Term, completion: Completion) -> str | None:
    """Why ``completion``'s answer breaks ``term``, or ``None`` when it fits.

    A constraint that spells out the think block (``<think>...</think>answer``), on a server
    whose reasoning parser split it off, is checked against the output as generated.
    """
    reason = violation(term, completion.text)
    thought = completion.reasoning
    if reason is not None and thought is not None:
        return violation(term, f"<think>{thought}</think>{completion.text}") and reason
    return reason


def check_answers(
    label: str,
    term: Term | None,
    completions: Iterable[Completion],
    *,
    verify: Verify,
    stacklevel: int,
    server: str | None = None,
    server_version: str | None = None,
    fields: Mapping[str, Any] | None = None,
    sink: Sink | None = None,
) -> Verdict:
    """Apply the one rule for answers under an output type (see the module docstring).

    Args:
        label: How to name the output type in messages.
        term: The output type's term; ``None`` (free text) is never checked.
        completions: The answers.
        verify: ``True`` raise, ``"warn"`` warn, ``False`` check nothing.
        stacklevel: Passed to :func:`warnings.warn`, counted from this function.
        server: The server kind, for the error (``None`` for a local model).
        server_version: The server's version, when known.
        fields: The constraint fields that were sent.
        sink: Keep the warnings here instead of issuing them.

    Returns:
        ``"passed"`` (every answer fits), ``"warned"`` (``verify="warn"`` and one does not
        fit) or ``"skipped"`` (``verify=False``, or free text).

    Raises:
        GenerationError: an answer cut at ``max_tokens`` does not fit (``reason="length"``).
        ConstraintViolationError: an answer does not fit and was not cut.
    """
    if term is None or verify is False:
        verdict: Verdict = "skipped"
    else:
        verdict = "passed"
    if term is None:
        return verdict
    for completion in completions:
        text = completion.text
        cut = completion.finish_reason == "length"
        reason = misfit(term, completion) if verify is not False else None
        if reason is None:
            if cut:
                emit(
                    f"the output for output_type={label} was cut at max_tokens "
                    f"(finish_reason='length'); it fits, but may be shorter than the model "
                    f"meant: {text[:200]!r}; raise max_tokens",
                    TruncatedOutputWarning,
                    stacklevel=stacklevel + 1,
                    sink=sink,
                )
            continue
        if cut:
            raise GenerationError(
                f"the output for output_type={label} was cut at max_tokens "
                f"(finish_reason='length') before it was complete: {text[:200]!r}; "
                "raise max_tokens",
                reason="length",
                text=text,
            )
        where = f"the {server} server" if server else "the model"
        if server_version:
            where += f" ({server_version})"
        message = (
            f"{where} returned an answer that does not fit output_type={label}: {reason}. "
            "The server did not enforce the constraint it was sent"
            + (f" ({', '.join(sorted(fields))})" if fields else "")
            + "; see docs/servers/enforcement.md"
        )
        if verify == "warn":
            emit(message, ConstraintViolationWarning, stacklevel=stacklevel + 1, sink=sink)
            verdict = "warned"
            continue
        raise ConstraintViolationError(
            message,
            text=text,
            reason=reason,
            server=server,
            server_version=server_version,
            fields=dict(fields or {}),
        )
    return verdict


def plain_answer(message: object) -> str | None:
    """The content when it holds no reasoning at all (the common case, read fast), else None."""
    content = read_field(message, "content")
    if not isinstance(content, str) or "think>" in content:
        return None
    for name in REASONING_FIELDS:
        if read_field(message, name):
            return None
    return content


def request_id(response: object) -> str | None:
    """The server's request id of an SDK response, when it sent one."""
    value = getattr(response, "_request_id", None)
    return value if isinstance(value, str) else None


def refused(refusal: str, rid: str | None) -> GenerationError:
    """The error for a refusal."""
    return GenerationError(
        f"the model refused to answer: {refusal!r}",
        reason="refusal",
        text=refusal,
        request_id=rid,
    )


def filtered(text: str, rid: str | None) -> GenerationError:
    """The error for output stopped by a content filter."""
    return GenerationError(
        "the server's content filter stopped the output (finish_reason='content_filter')",
        reason="content_filter",
        text=text,
        request_id=rid,
    )


def read_response(response: object, *, chat: bool, text_tools: bool) -> list[Completion]:
    """Read every choice of a whole response.

    Args:
        response: The SDK's response object (or a dict of the same shape).
        chat: Whether it answers ``/v1/chat/completions`` (else ``/v1/completions``).
        text_tools: Read ``<tool_call>`` blocks out of the text (a call with ``tools=``).

    Raises:
        GenerationError: a choice was refused or stopped by a content filter.
        ProviderResponseError: the response has no choices or malformed fields.
    """
    rid = request_id(response)
    choices = read_field(response, "choices")
    if not choices:
        raise ProviderResponseError("the server answered without choices", request_id=rid)
    usage = read_usage(read_field(response, "usage"))
    out = []
    for choice in choices:
        finish = read_field(choice, "finish_reason")
        tool_calls: tuple[ToolCall, ...] = ()
        if chat:
            message = read_field(choice, "message")
            if message is None:
                raise ProviderResponseError("a choice has no message", request_id=rid)
            refusal = read_field(message, "refusal")
            if refusal:
                raise refused(str(refusal), rid)
            plain = plain_answer(message)
            if plain is not None:
                reasoning, text = None, plain
            else:
                try:
                    reasoning, text = reasoning_from_message(message, finish_reason=finish)
                except TypeError as exc:
                    raise ProviderResponseError(str(exc), request_id=rid) from exc
            tool_calls = tuple(tool_calls_from_message(message))
            if not tool_calls and text_tools and "<tool_call>" in text:
                # A server without a tool parser: the calls are in the text.
                found, text = parse_tool_calls(text)
                tool_calls = tuple(found)
        else:
            raw_text = read_field(choice, "text")
            reasoning, text = split_reasoning(raw_text if isinstance(raw_text, str) else "")
        if finish == "content_filter":
            raise filtered(text, rid)
        out.append(Completion(text, reasoning, tool_calls, finish, usage, response))
    return out


class StreamView:
    """What ``model.stream`` yields: a thin view over ``streaming.StreamAggregator``.

    The chunks go through the same aggregator as ``aggregate_chunks``, so every recovery
    rule (an answer inside a reasoning field, a lone ``</think>``, error chunks, tool calls
    written as text) gives the same answer on both paths, and the same as ``model(...)``.
    ``feed(chunk)`` returns the answer delta of one chunk; ``finish()`` returns the rest of
    the answer that only the end of the stream revealed (e.g. an answer recovered from the
    reasoning field) and runs the end-of-stream checks (refusal, content filter, the answer
    rule of ``check_answers``).

    Two cases hold the text back so that what is yielded is exactly the final answer:
    a model whose name says it thinks (its template may open ``<think>``, so a lone
    ``</think>`` can still turn the text before it into reasoning) holds its answer until
    ``</think>``, a reasoning-field delta (the server splits reasoning) or the end; a call
    with ``tools=...`` holds it to the end (``<tool_call>`` text is removed from the answer).
    Text that a later rule rewrites after it was yielded (a lone ``</think>`` from a model not
    known to think) cannot be taken back: a ``ReasoningRecoveredWarning`` says so.

    Args:
        text_tools: Read ``<tool_call>`` blocks out of the text (a call with ``tools=``).
        hold_answer: The model is known to think: hold the answer until reasoning ends.
        on_usage: Called with the stream's usage at the end.
        check: Called with the final completion and a stacklevel (the answer rule).
    """

    __slots__ = ("_agg", "_check", "_eager", "_on_usage", "completion", "first", "text")

    def __init__(
        self,
        *,
        text_tools: bool,
        hold_answer: bool,
        on_usage: Callable[[Any], None],
        check: Callable[[list[Completion], int], None],
    ) -> None:
        self._agg = StreamAggregator(text_tool_calls=text_tools, hold_answer=hold_answer)
        self._eager = not text_tools
        self._on_usage = on_usage
        self._check = check
        self.text = ""
        """The answer yielded so far."""
        self.completion: Completion | None = None
        """The whole answer, once ``finish`` read it (before its checks ran)."""
        self.first: object = None
        """The stream's first chunk (its ``id`` and ``model`` name the response)."""

    def feed(self, chunk: object) -> str:
        """Take one chunk; return its answer delta (possibly empty).

        Raises:
            ProviderResponseError: the chunk is an error event or cannot be read.
        """
        if self.first is None:
            self.first = chunk
        deltas = self._agg.feed(chunk)
        if not self._eager:
            return ""
        text = "".join(d.content for d in deltas if d.index == 0)
        self.text += text
        return text

    def finish(self, *, stacklevel: int = 1) -> str:
        """Return the rest of the answer; raise or warn on a bad ending.

        Raises:
            GenerationError: the model refused, a content filter stopped it, or it was cut
                at ``max_tokens`` before the answer fit.
            ConstraintViolationError: the whole answer does not fit the output type.
            ProviderResponseError: the stream carried no first choice, or ended before a
                finish reason (a connection closed early looks like a clean end).
        """
        agg = self._agg
        try:
            message = agg.result(0)
        except KeyError as exc:
            raise ProviderResponseError(str(exc.args[0])) from exc
        self._on_usage(agg.usage)
        if message.refusal:
            raise refused(message.refusal, None)
        if message.finish_reason is None:
            raise ProviderResponseError(
                "the stream ended before the server finished the answer (no finish_reason): "
                f"it may be cut; received {message.content[-200:]!r}"
            )
        if message.finish_reason == "content_filter":
            raise filtered(message.content, None)
        answer = message.content
        tail = ""
        if answer.startswith(self.text):
            tail = answer[len(self.text) :]
        else:
            warnings.warn(
                "text already streamed turned out to be reasoning (a lone '</think>' came "
                f"later); the answer is {answer[:80]!r}. Name the model so that it is known "
                "to think (model_name=...), or use model(...)",
                ReasoningRecoveredWarning,
                stacklevel=stacklevel + 1,
            )
        self.text += tail
        self.completion = message.to_completion()
        self._check([self.completion], stacklevel + 1)
        return tail
