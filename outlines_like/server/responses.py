"""Response shaping: OpenAI JSON bodies and SSE chunks from a finished or running job.

Nothing here runs the model: it reads :class:`~outlines_like.server.service.Job` runs (and,
when streaming, the outputs the service yields) and writes what the OpenAI API returns:
``chat.completion`` / ``text_completion`` bodies, ``chat.completion.chunk`` events with the
reasoning split and tool calls parsed as the text grows, usage, and error bodies.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

from outlines_like.engine.pipeline import StepOutput
from outlines_like.engine.runs import Run
from outlines_like.server.config import SERVER_VERSION
from outlines_like.server.dialects import RequestError
from outlines_like.server.logprobs import logprobs_content
from outlines_like.server.service import Job

__all__ = [
    "ChatStreamState",
    "chat_completion",
    "chat_events",
    "error_body",
    "error_kind",
    "response_head",
    "split_message",
    "sse",
    "stream_error",
    "text_completion",
    "text_completion_events",
    "usage",
]

_log = logging.getLogger("outlines_like.server")


def error_body(message: str, *, kind: str, param: str | None, code: str | None) -> dict[str, Any]:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_kind(status: int) -> str:
    """The OpenAI error ``type`` for an HTTP status."""
    return {
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "invalid_request_error",
        429: "rate_limit_error",
    }.get(status, "invalid_request_error" if status < 500 else "server_error")


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """An OpenAI ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def response_head(kind: Literal["chat", "completion"], model_name: str) -> dict[str, Any]:
    """The fields every response and chunk of one request shares (a fresh id)."""
    prefix = "chatcmpl" if kind == "chat" else "cmpl"
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "created": int(time.time()),
        "model": model_name,
        "system_fingerprint": f"outlines-like-{SERVER_VERSION}",
    }


def split_message(text: str, tools: bool, think_open: bool) -> tuple[dict[str, Any], bool]:
    """A chat message from the generated text: reasoning split, tool calls parsed."""
    from outlines_like.reasoning import split_reasoning

    reasoning, answer = split_reasoning(text, think_open=think_open)
    message: dict[str, Any] = {"role": "assistant", "content": answer}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    called = False
    if tools:
        from outlines_like.tools import ToolCallParser

        with warnings.catch_warnings():
            # A malformed block stays in the content; the client sees it there.
            warnings.simplefilter("ignore")
            calls, rest = ToolCallParser(
                id_factory=lambda i: f"call_{uuid.uuid4().hex[:24]}"
            ).parse_complete(answer)
        if calls:
            called = True
            message["content"] = rest or None
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in calls
            ]
    return message, called


class ChatStreamState:
    """Per-choice streaming parsers: reasoning split, then tool calls."""

    def __init__(self, tools: bool, think_open: bool) -> None:
        from outlines_like.reasoning import ReasoningStream
        from outlines_like.tools import ToolCallParser

        self.reasoning = ReasoningStream(think_open=think_open)
        self.tools = (
            ToolCallParser(id_factory=lambda i: f"call_{uuid.uuid4().hex[:24]}") if tools else None
        )
        self.called = False

    def _answer(self, text: str, final: bool) -> list[dict[str, Any]]:
        from outlines_like.tools import ContentDelta

        if self.tools is None:
            return [{"content": text}] if text else []
        with warnings.catch_warnings():  # a malformed block is left in the content
            warnings.simplefilter("ignore")
            parsed = list(self.tools.parse_delta(text) or []) if text else []
            if final:
                parsed += self.tools.finish()
        out: list[dict[str, Any]] = []
        for item in parsed:
            if isinstance(item, ContentDelta):
                if item.text:
                    out.append({"content": item.text})
            else:
                self.called = True
                out.append({"tool_calls": [item.to_openai()]})
        return out

    def feed(self, text: str) -> list[dict[str, Any]]:
        """The chunk deltas for a piece of generated text (maybe none yet)."""
        reasoning, answer = self.reasoning.feed(text)
        out = [{"reasoning_content": reasoning}] if reasoning else []
        return out + self._answer(answer, final=False)

    def finish(self) -> list[dict[str, Any]]:
        """The deltas held back until the text ended."""
        reasoning, answer = self.reasoning.finish()
        out = [{"reasoning_content": reasoning}] if reasoning else []
        return out + self._answer(answer, final=True)


def sse(data: Mapping[str, Any] | str) -> bytes:
    """One server-sent event (compact JSON, or a literal such as ``[DONE]``)."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


def stream_error(exc: Exception) -> bytes:
    """The SSE event that reports a failure once a stream has started.

    A refused request keeps its message; anything else is an internal error (logged here).
    """
    if isinstance(exc, RequestError):
        return sse(
            error_body(exc.message, kind="invalid_request_error", param=exc.param, code=exc.code)
        )
    _log.exception("stream failed", exc_info=exc)
    return sse(
        error_body(
            f"internal error: {type(exc).__name__}",
            kind="server_error",
            param=None,
            code="internal_error",
        )
    )


# --------------------------------------------------------------------------- bodies


def _finish_reason(called: bool, reason: str | None) -> str | None:
    return "tool_calls" if called and reason == "stop" else reason


def chat_completion(head: Mapping[str, Any], job: Job) -> dict[str, Any]:
    """The ``chat.completion`` body of a finished chat job."""
    choices = []
    for run in job.runs:
        message, called = split_message(run.text, job.tools, run.think_open)
        tokens = job.token_bytes
        choices.append(
            {
                "index": run.index,
                "message": message,
                "logprobs": None if tokens is None else logprobs_content(run.infos, tokens),
                "finish_reason": _finish_reason(called, run.finish_reason),
            }
        )
    return {
        **head,
        "object": "chat.completion",
        "choices": choices,
        "usage": usage(job.prompt_tokens, job.completion_tokens),
    }


def text_completion(head: Mapping[str, Any], job: Job) -> dict[str, Any]:
    """The ``text_completion`` body of a finished completions job."""
    choices = [
        {"index": r.index, "text": r.text, "logprobs": None, "finish_reason": r.finish_reason}
        for r in job.runs
    ]
    return {
        **head,
        "object": "text_completion",
        "choices": choices,
        "usage": usage(job.prompt_tokens, job.completion_tokens),
    }


# --------------------------------------------------------------------------- streams


async def _framed(
    chunk: Mapping[str, Any], job: Job, events: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """A stream's events, then its usage chunk (when asked) and ``[DONE]``.

    A failure once the stream has started is reported in-band and ends it.
    """
    try:
        async for event in events:
            yield event
    except Exception as exc:
        yield stream_error(exc)
        return
    if job.common.include_usage:
        yield sse(
            {**chunk, "choices": [], "usage": usage(job.prompt_tokens, job.completion_tokens)}
        )
    yield sse("[DONE]")


def chat_events(
    head: Mapping[str, Any], job: Job, outputs: AsyncIterator[tuple[Run, StepOutput]]
) -> AsyncIterator[bytes]:
    """The SSE events of a streamed chat job, from the service's outputs; ends ``[DONE]``."""
    chunk = {**head, "object": "chat.completion.chunk"}
    usage_null = {"usage": None} if job.common.include_usage else {}
    states = {r.index: ChatStreamState(job.tools, r.think_open) for r in job.runs}

    def piece(
        index: int,
        delta: dict[str, Any],
        reason: str | None = None,
        logprobs: dict[str, Any] | None = None,
    ) -> bytes:
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": reason}
        return sse({**chunk, "choices": [choice], **usage_null})

    async def events() -> AsyncIterator[bytes]:
        for run in job.runs:
            yield piece(run.index, {"role": "assistant", "content": ""})
        async for run, out in outputs:
            state = states[run.index]
            deltas = state.feed(out.text)
            logprobs = None
            if job.token_bytes is not None and out.info is not None:
                logprobs = logprobs_content([out.info], job.token_bytes)
                deltas = deltas or [{}]  # the step's token is reported even when its text waits
            for k, delta in enumerate(deltas):
                yield piece(run.index, delta, logprobs=None if k else logprobs)
            if out.finished:
                for delta in state.finish():
                    yield piece(run.index, delta)
                yield piece(run.index, {}, _finish_reason(state.called, out.finish_reason))

    return _framed(chunk, job, events())


def text_completion_events(
    head: Mapping[str, Any], job: Job, outputs: AsyncIterator[tuple[Run, StepOutput]]
) -> AsyncIterator[bytes]:
    """The SSE events of a streamed completions job; ends ``[DONE]``."""
    chunk = {**head, "object": "text_completion"}
    usage_null = {"usage": None} if job.common.include_usage else {}

    async def events() -> AsyncIterator[bytes]:
        async for run, out in outputs:
            if out.text or out.finished:
                choice = {
                    "index": run.index,
                    "text": out.text,
                    "logprobs": None,
                    "finish_reason": out.finish_reason if out.finished else None,
                }
                yield sse({**chunk, "choices": [choice], **usage_null})

    return _framed(chunk, job, events())
