"""Response shaping without HTTP: OpenAI bodies and SSE chunks from jobs and their outputs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from outlines_like.engine.pipeline import GenerationRequest, SamplingParams, StepOutput
from outlines_like.engine.runs import Run
from outlines_like.server.dialects import RequestError
from outlines_like.server.responses import (
    chat_completion,
    chat_events,
    error_kind,
    response_head,
    stream_error,
    text_completion,
    text_completion_events,
)
from outlines_like.server.service import Job
from outlines_like.server.validation import Common

CALL = '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
HEAD = {"id": "x", "created": 0, "model": "tiny", "system_fingerprint": "fp"}


def _job(texts: list[str], *, kind: Any = "chat", tools: bool = False, usage: bool = False) -> Job:
    runs = []
    for i, text in enumerate(texts):
        run = Run(GenerationRequest(f"r{i}", (1, 2, 3), SamplingParams()), i, think_open=False)
        run.text, run.finish_reason, run.completion_tokens = text, "stop", 4
        runs.append(run)
    common = Common(SamplingParams(), len(texts), True, usage)
    return Job(kind, runs, 3, common, tools)


def _events(raw: Iterable[bytes]) -> list[Any]:
    out = []
    for event in raw:
        assert event.startswith(b"data: ")
        assert event.endswith(b"\n\n")
        payload = event[6:-2].decode()
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


async def _collect(events: AsyncIterator[bytes]) -> list[Any]:
    return _events([e async for e in events])


async def _outputs(job: Job, pieces: list[tuple[int, str, bool]]) -> AsyncIterator[Any]:
    for index, text, finished in pieces:
        run = job.runs[index]
        k = run.completion_tokens
        yield (
            run,
            StepOutput(
                run.request.request_id, (1,), text, finished, "stop" if finished else None, 3, k
            ),
        )


async def _failing(job: Job, exc: Exception) -> AsyncIterator[Any]:
    raise exc
    yield  # pragma: no cover


def test_chat_body_splits_reasoning_and_tool_calls() -> None:
    body = chat_completion(HEAD, _job(["<think>hm</think>" + CALL, "plain"], tools=True))
    first, second = body["choices"]
    assert first["finish_reason"] == "tool_calls"
    assert first["message"]["reasoning_content"] == "hm"
    assert first["message"]["content"] is None
    call = first["message"]["tool_calls"][0]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("f", {"x": 1})
    assert second == {
        "index": 1,
        "message": {"role": "assistant", "content": "plain"},
        "logprobs": None,
        "finish_reason": "stop",
    }
    assert body["object"] == "chat.completion"
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11}


def test_without_tools_a_tool_block_is_content() -> None:
    body = chat_completion(HEAD, _job([CALL]))
    assert body["choices"][0]["message"]["content"] == CALL
    assert body["choices"][0]["finish_reason"] == "stop"


def test_text_completion_body() -> None:
    body = text_completion(HEAD, _job(["ab", "cd"], kind="completion"))
    assert [c["text"] for c in body["choices"]] == ["ab", "cd"]
    assert body["object"] == "text_completion"


async def test_chat_events_stream_reasoning_then_a_tool_call() -> None:
    job = _job(["", ""], tools=True, usage=True)
    text = "<think>hm</think>" + CALL
    pieces = [(0, text[:9], False), (1, "hello", True), (0, text[9:], True)]
    events = await _collect(chat_events(HEAD, job, _outputs(job, pieces)))
    assert events[-1] == "[DONE]"
    usage = events[-2]
    assert usage["choices"] == []
    assert usage["usage"]["prompt_tokens"] == 3
    chunks = events[:-2]
    assert all(c["object"] == "chat.completion.chunk" and "usage" in c for c in chunks)
    deltas = [(c["choices"][0]["index"], c["choices"][0]["delta"]) for c in chunks]
    assert deltas[:2] == [
        (0, {"role": "assistant", "content": ""}),
        (1, {"role": "assistant", "content": ""}),
    ]
    reasoning = "".join(d.get("reasoning_content", "") for i, d in deltas if i == 0)
    assert reasoning.strip() == "hm"
    calls = [d["tool_calls"][0] for i, d in deltas if "tool_calls" in d]
    assert calls[0]["function"]["name"] == "f"
    reasons = {
        c["choices"][0]["index"]: c["choices"][0]["finish_reason"]
        for c in chunks
        if c["choices"][0]["finish_reason"]
    }
    assert reasons == {0: "tool_calls", 1: "stop"}


async def test_text_completion_events_skip_empty_steps() -> None:
    job = _job(["", ""], kind="completion")
    pieces = [(0, "a", False), (0, "", False), (1, "b", True), (0, "", True)]
    events = await _collect(text_completion_events(HEAD, job, _outputs(job, pieces)))
    assert events[-1] == "[DONE]"
    shaped = [
        (e["choices"][0]["index"], e["choices"][0]["text"], e["choices"][0]["finish_reason"])
        for e in events[:-1]
    ]
    assert shaped == [(0, "a", None), (1, "b", "stop"), (0, "", "stop")]
    assert all("usage" not in e for e in events[:-1])  # not asked for


@pytest.mark.parametrize("make", [chat_events, text_completion_events])
async def test_a_failure_inside_a_stream_is_reported_in_band(make: Any) -> None:
    job = _job([""])
    events = await _collect(make(HEAD, job, _failing(job, RuntimeError("boom"))))
    assert events[-1]["error"]["code"] == "internal_error"
    assert events[-1]["error"]["type"] == "server_error"
    assert "[DONE]" not in events


def test_stream_error_keeps_a_refusal() -> None:
    [event] = _events([stream_error(RequestError("bad", param="p", code="c"))])
    assert event == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "p", "code": "c"}
    }


def test_heads_and_error_kinds() -> None:
    assert response_head("chat", "tiny")["id"].startswith("chatcmpl-")
    assert response_head("completion", "tiny")["id"].startswith("cmpl-")
    assert response_head("chat", "tiny")["id"] != response_head("chat", "tiny")["id"]
    assert [error_kind(s) for s in (400, 401, 404, 413, 500)] == [
        "invalid_request_error",
        "authentication_error",
        "not_found_error",
        "invalid_request_error",
        "server_error",
    ]
