"""The reference server's SERVER spans, joined to the caller's trace by ``traceparent``."""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

import httpx
import openai
import pytest

import outlines_like as ol
from tests._otel import by_name, children, spans, trace

__all__ = ["spans"]  # the fixture, imported to be used here

pytestmark = [pytest.mark.server, pytest.mark.torch]

BODY = {
    "messages": [{"role": "user", "content": "Pick."}],
    "max_tokens": 8,
    "temperature": 0,
    "structured_outputs": {"regex": "(yes|no)"},
}


def test_a_request_is_one_server_span_with_genai_attributes(spans: Any, server: Any) -> None:
    answer = httpx.post(server.base_url + "/v1/chat/completions", json=BODY, timeout=60).json()
    (span,) = by_name(spans, "chat tiny")
    assert span.kind == trace.SpanKind.SERVER
    attrs = dict(span.attributes)
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "outlines-like"
    assert attrs["gen_ai.request.model"] == "tiny"
    assert attrs["gen_ai.request.max_tokens"] == 8
    assert attrs["gen_ai.request.temperature"] == 0.0
    assert attrs["gen_ai.response.id"] == answer["id"]
    assert attrs["gen_ai.response.finish_reasons"] == (answer["choices"][0]["finish_reason"],)
    assert attrs["gen_ai.usage.input_tokens"] == answer["usage"]["prompt_tokens"]
    assert attrs["gen_ai.usage.output_tokens"] == answer["usage"]["completion_tokens"]
    assert attrs["outlines_like.dialect"] == "structured_outputs.regex"
    assert attrs["outlines_like.constraint.kind"] == "regex"
    assert attrs["server.address"] == "127.0.0.1"
    assert attrs["http.route"] == "/v1/chat/completions"


def test_the_server_span_joins_the_callers_trace(spans: Any, server: Any) -> None:
    from opentelemetry import propagate

    with trace.get_tracer("app").start_as_current_span("caller") as caller:
        headers: dict[str, str] = {}
        propagate.inject(headers)
        body = {**BODY, "prompt": "Pick.", "messages": None}
        del body["messages"]
        httpx.post(server.base_url + "/v1/completions", json=body, headers=headers, timeout=60)
    (span,) = by_name(spans, "text_completion tiny")
    assert span.parent.span_id == caller.get_span_context().span_id
    assert span.context.trace_id == caller.get_span_context().trace_id


def test_a_streamed_request_ends_its_span_with_the_last_event(spans: Any, server: Any) -> None:
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream(
        "POST", server.base_url + "/v1/chat/completions", json=body, timeout=60
    ) as response:
        events = [line for line in response.iter_lines() if line.startswith("data: {")]
    usage = json.loads(events[-1][6:])["usage"]
    (span,) = by_name(spans, "chat tiny")
    assert span.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    assert span.status.status_code == trace.StatusCode.UNSET


def test_a_refused_request_is_not_the_servers_error(
    spans: Any, server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    bad = {**BODY, "max_tokens": -1}
    with caplog.at_level(logging.INFO, logger="outlines_like.server"):
        assert httpx.post(server.base_url + "/v1/chat/completions", json=bad).status_code == 400
    (span,) = by_name(spans, "chat")
    assert span.attributes["error.type"] == "RequestError"
    assert span.status.status_code == trace.StatusCode.UNSET
    records = [r for r in caplog.records if getattr(r, "ol_error", None) == "RequestError"]
    assert [r.levelno for r in records] == [logging.INFO]


def test_client_and_server_spans_of_one_call(spans: Any, server: Any) -> None:
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="-", max_retries=0)
    model = ol.from_server(client)
    assert model("Pick.", Literal["yes", "no"], max_tokens=8) in ("yes", "no")
    client_span = next(s for s in by_name(spans, "chat tiny") if s.kind == trace.SpanKind.CLIENT)
    server_span = next(s for s in by_name(spans, "chat tiny") if s.kind == trace.SpanKind.SERVER)
    assert client_span.attributes["outlines_like.server.kind"] == "vllm"
    assert client_span.attributes["outlines_like.verification"] == "passed"
    assert (
        client_span.attributes["gen_ai.usage.output_tokens"]
        == server_span.attributes["gen_ai.usage.output_tokens"]
    )
    attempts = [s for s in children(spans, client_span) if s.kind == trace.SpanKind.INTERNAL]
    assert [a.name for a in attempts] == ["attempt 1"]
    # the request carried the call's context: one trace, the server's span under the call's
    assert server_span.context.trace_id == client_span.context.trace_id
    assert server_span.parent.span_id == client_span.context.span_id
