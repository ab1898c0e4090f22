"""Spans and log records of remote calls: call, parse, stream, batch, retries, failures."""

from __future__ import annotations

import logging
from typing import Any, Literal

import httpx2
import pydantic
import pytest

import outlines_like as ol
import outlines_like.models as m
from outlines_like import telemetry
from outlines_like.errors import BadRequestError, ConstraintViolationError, ParseError
from tests._otel import by_name, children, spans, trace
from tests.conftest import FakeServer, chat_body, chunk, sse

__all__ = ["spans"]  # the fixture, imported to be used here

Colour = Literal["red", "green"]
USAGE = {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}


class Hero(pydantic.BaseModel):
    name: str
    age: int


def model(fake: FakeServer, **kw: Any) -> m.Model:
    return ol.from_server(fake.client(), server="sglang", model_name="tiny", **kw)


def amodel(fake: FakeServer, **kw: Any) -> m.AsyncModel:
    return ol.from_server(fake.aclient(), server="sglang", model_name="tiny", **kw)


def no_sleep(**kw: Any) -> m.RetryPolicy:
    async def asleep(_: float) -> None:
        return None

    return m.RetryPolicy(sleep=lambda _: None, async_sleep=asleep, jitter=False, **kw)


def the_call(exporter: Any) -> Any:
    (span,) = by_name(exporter, "chat tiny")
    return span


def test_a_call_is_one_client_span_with_the_genai_attributes(spans: Any) -> None:
    fake = FakeServer(chat_body("green", usage=USAGE))
    assert model(fake)("Pick.", Colour, max_tokens=5, temperature=0.5) == "green"

    span = the_call(spans)
    assert span.kind == trace.SpanKind.CLIENT
    assert span.status.status_code == trace.StatusCode.UNSET
    attrs = dict(span.attributes)
    assert attrs == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "tiny",
        "gen_ai.provider.name": "sglang",
        "gen_ai.system": "sglang",
        "gen_ai.request.max_tokens": 5,
        "gen_ai.request.temperature": 0.5,
        "server.address": "127.0.0.1",
        "server.port": 8000,
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.response.model": "tiny",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 4,
        "outlines_like.method": "call",
        "outlines_like.output_type": "Literal",
        "outlines_like.constraint.kind": "choice",
        "outlines_like.server.kind": "sglang",
        "outlines_like.dialect": "regex",
        "outlines_like.verification": "passed",
        "outlines_like.retries": 0,
    }
    (attempt,) = children(spans, span)
    assert attempt.name == "attempt 1"
    assert attempt.attributes["outlines_like.attempt"] == 1
    # the request carries the call's context (W3C trace context) for the server's span
    ids = f"{span.context.trace_id:032x}-{span.context.span_id:016x}"
    assert fake.requests[-1].headers["traceparent"].startswith(f"00-{ids}-")
    assert fake.requests[-1].headers["x-team"] == "blue"


def test_the_callers_extra_headers_are_kept_and_not_mutated(spans: Any) -> None:
    fake = FakeServer(chat_body("red"))
    mine = {"X-Mine": "1"}
    model(fake)("Pick.", Colour, extra_headers=mine)
    assert mine == {"X-Mine": "1"}
    assert fake.requests[-1].headers["x-mine"] == "1"
    assert "traceparent" in fake.requests[-1].headers


def test_without_tracing_no_trace_header_is_sent() -> None:
    fake = FakeServer(chat_body("red"))
    model(fake)("Pick.", Colour)
    assert "traceparent" not in fake.requests[-1].headers


def test_parse_names_the_schema_and_the_response_format(spans: Any) -> None:
    fake = FakeServer(chat_body('{"name": "Ada", "age": 36}'))
    assert model(fake).parse("Hero?", Hero) == Hero(name="Ada", age=36)
    attrs = the_call(spans).attributes
    assert attrs["outlines_like.method"] == "parse"
    assert attrs["outlines_like.output_type"] == "Hero"
    assert attrs["outlines_like.constraint.kind"] == "json_schema"
    assert attrs["outlines_like.dialect"] == "response_format.json_schema"


def test_free_text_has_no_constraint_attributes(spans: Any) -> None:
    model(FakeServer(chat_body("hi")))("Hello")
    attrs = the_call(spans).attributes
    assert "outlines_like.constraint.kind" not in attrs
    assert "outlines_like.verification" not in attrs


def test_retries_are_child_spans_of_one_call_span(
    spans: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fail = httpx2.Response(503, json={"error": {"message": "busy"}})
    fake = FakeServer(fail, fail, chat_body("red"))
    with caplog.at_level(logging.INFO, logger="outlines_like"):
        assert model(fake, retry=no_sleep())("Pick.", Colour) == "red"

    span = the_call(spans)
    assert span.attributes["outlines_like.retries"] == 2
    assert span.status.status_code == trace.StatusCode.UNSET
    attempts = children(spans, span)
    assert [a.name for a in attempts] == ["attempt 1", "attempt 2", "attempt 3"]
    assert [a.status.status_code for a in attempts] == [
        trace.StatusCode.ERROR,
        trace.StatusCode.ERROR,
        trace.StatusCode.UNSET,
    ]
    assert attempts[0].attributes["error.type"] == "ServerError"
    assert attempts[0].events[0].name == "exception"

    retries = [r for r in caplog.records if r.levelno == logging.INFO]
    assert [r.ol_attempt for r in retries] == [1, 2]  # type: ignore[attr-defined]
    assert retries[0].name == "outlines_like.models"
    assert retries[0].ol_status_code == 503  # type: ignore[attr-defined]
    assert retries[0].ol_error == "ServerError"  # type: ignore[attr-defined]


def test_a_failed_call_is_an_error_span_and_a_warning(
    spans: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeServer(httpx2.Response(400, json={"error": {"message": "bad field"}}))
    with (
        caplog.at_level(logging.INFO, logger="outlines_like"),
        pytest.raises(BadRequestError),
    ):
        model(fake)("Pick.", Colour)

    span = the_call(spans)
    assert span.status.status_code == trace.StatusCode.ERROR
    assert span.attributes["error.type"] == "BadRequestError"
    assert [e.name for e in span.events] == ["exception"]
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.name == "outlines_like.models"
    assert record.ol_error == "BadRequestError"  # type: ignore[attr-defined]
    assert record.ol_model == "tiny"  # type: ignore[attr-defined]


def test_a_constraint_violation_is_recorded_as_failed_verification(spans: Any) -> None:
    with pytest.raises(ConstraintViolationError):
        model(FakeServer(chat_body("blue")))("Pick.", Colour)
    span = the_call(spans)
    assert span.attributes["outlines_like.verification"] == "failed"
    assert span.attributes["error.type"] == "ConstraintViolationError"


def test_warn_and_skip_verdicts(spans: Any) -> None:
    fake = FakeServer(chat_body("blue"), chat_body("blue"))
    with pytest.warns(ol.errors.ConstraintViolationWarning):
        model(fake)("Pick.", Colour, verify="warn")
    model(fake)("Pick.", Colour, verify=False)
    verdicts = [s.attributes["outlines_like.verification"] for s in by_name(spans, "chat tiny")]
    assert verdicts == ["warned", "skipped"]


def test_a_parse_error_after_a_fitting_answer_is_the_calls_error(spans: Any) -> None:
    class Strict(pydantic.BaseModel):
        age: int

        @pydantic.field_validator("age")
        @classmethod
        def adult(cls, v: int) -> int:
            if v < 18:
                raise ValueError("too young")
            return v

    with pytest.raises(ParseError):
        model(FakeServer(chat_body('{"age": 3}'))).parse("Age?", Strict)
    span = the_call(spans)
    assert span.attributes["outlines_like.verification"] == "passed"
    assert span.status.status_code == trace.StatusCode.ERROR


def test_a_stream_span_ends_at_the_last_chunk(spans: Any) -> None:
    fake = FakeServer(
        sse(chunk("gr"), chunk("een"), chunk(finish="stop") | {"usage": USAGE}),
    )
    stream = model(fake).stream("Pick.", Colour)
    first = next(stream)
    assert first == "gr"
    assert by_name(spans, "chat tiny") == []  # still open
    assert "".join(stream) == "een"
    span = the_call(spans)
    attrs = span.attributes
    assert attrs["outlines_like.method"] == "stream"
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert attrs["gen_ai.response.id"] == "c"
    assert attrs["gen_ai.usage.output_tokens"] == 4
    assert attrs["outlines_like.verification"] == "passed"
    assert [a.name for a in children(spans, span)] == ["attempt 1"]


def test_a_stream_closed_early_ends_its_span_without_error(spans: Any) -> None:
    fake = FakeServer(sse(chunk("gr"), chunk("een"), chunk(finish="stop")))
    stream = model(fake).stream("Pick.", Colour)
    next(stream)
    stream.close()
    span = the_call(spans)
    assert span.attributes["outlines_like.stream.closed"] is True
    assert span.status.status_code == trace.StatusCode.UNSET


def test_a_stream_that_fails_ends_its_span_with_the_error(spans: Any) -> None:
    fake = FakeServer(sse(chunk("bl"), chunk("ue"), chunk(finish="stop")))
    with pytest.raises(ConstraintViolationError):
        list(model(fake).stream("Pick.", Colour))
    span = the_call(spans)
    assert span.status.status_code == trace.StatusCode.ERROR
    assert span.attributes["outlines_like.verification"] == "failed"


def test_batch_is_a_parent_span_over_one_span_per_item(spans: Any) -> None:
    fake = FakeServer(chat_body("red"), chat_body("green"), chat_body("red"))
    assert sorted(model(fake).batch(["a", "b", "c"], Colour, max_concurrency=2)) == [
        "green",
        "red",
        "red",
    ]
    (parent,) = by_name(spans, "batch chat")
    assert parent.attributes["outlines_like.batch.size"] == 3
    items = children(spans, parent)
    assert [s.name for s in items] == ["chat tiny"] * 3
    assert {s.attributes["outlines_like.method"] for s in items} == {"batch"}
    for item in items:
        assert [a.name for a in children(spans, item)] == ["attempt 1"]
    assert {s.context.trace_id for s in spans.get_finished_spans()} == {parent.context.trace_id}


def test_a_batch_item_that_fails_is_an_error_span(spans: Any) -> None:
    fake = FakeServer(chat_body("red"), chat_body("blue"))
    out = model(fake).batch(["a", "b"], Colour, max_concurrency=1, return_exceptions=True)
    assert isinstance(out[1], ConstraintViolationError)
    (parent,) = by_name(spans, "batch chat")
    codes = sorted(s.status.status_code.name for s in children(spans, parent))
    assert codes == ["ERROR", "UNSET"]


async def test_async_call_stream_and_batch(spans: Any) -> None:
    fake = FakeServer(
        chat_body("red"),
        sse(chunk("green"), chunk(finish="stop")),
        chat_body("red"),
        chat_body("green"),
    )
    am = amodel(fake)
    assert await am("Pick.", Colour) == "red"
    assert [d async for d in am.stream("Pick.", Colour)] == ["green"]
    assert sorted(await am.batch(["a", "b"], Colour)) == ["green", "red"]

    calls = by_name(spans, "chat tiny")
    assert [s.attributes["outlines_like.method"] for s in calls] == [
        "call",
        "stream",
        "batch",
        "batch",
    ]
    (parent,) = by_name(spans, "batch chat")
    assert len(children(spans, parent)) == 2
    for call in calls:
        assert [a.name for a in children(spans, call)] == ["attempt 1"]


async def test_async_retries_and_failures(spans: Any) -> None:
    fail = httpx2.Response(500, json={"error": {"message": "boom"}})
    fake = FakeServer(fail, chat_body("red"), httpx2.Response(400, json={"error": {}}))
    am = amodel(fake, retry=no_sleep())
    assert await am("Pick.", Colour) == "red"
    with pytest.raises(BadRequestError):
        await am("Pick.", Colour)
    ok, failed = by_name(spans, "chat tiny")
    assert [a.name for a in children(spans, ok)] == ["attempt 1", "attempt 2"]
    assert ok.attributes["outlines_like.retries"] == 1
    assert failed.status.status_code == trace.StatusCode.ERROR


def test_the_call_span_is_the_parent_of_the_applications_spans(spans: Any) -> None:
    tracer = trace.get_tracer("app")
    with tracer.start_as_current_span("handle request") as outer:
        model(FakeServer(chat_body("red")))("Pick.", Colour)
    span = the_call(spans)
    assert span.parent.span_id == outer.get_span_context().span_id


def test_without_a_tracer_provider_nothing_is_traced() -> None:
    assert telemetry.tracer() is None
    fake = FakeServer(chat_body("red"))
    with telemetry.start("chat").active() as t:
        assert t.span is None
    assert model(fake)("Pick.", Colour) == "red"


def test_one_debug_record_per_request_with_its_fields(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeServer(chat_body("green", usage=USAGE))
    with caplog.at_level(logging.DEBUG, logger="outlines_like.models"):
        model(fake)("Pick.", Colour)
    (record,) = caplog.records
    assert record.levelno == logging.DEBUG
    assert record.name == "outlines_like.models"
    fields = {k[3:]: v for k, v in vars(record).items() if k.startswith("ol_")}
    assert fields.pop("duration_s") >= 0
    assert fields == {
        "operation": "chat",
        "method": "call",
        "output_type": "Literal",
        "constraint_kind": "choice",
        "model": "tiny",
        "server_kind": "sglang",
        "dialect": "regex",
        "input_tokens": 11,
        "output_tokens": 4,
        "attempts": 1,
        "retries": 0,
        "finish_reasons": ["stop"],
        "verification": "passed",
    }
    assert set(fields) <= set(telemetry.FIELDS)


def test_no_record_below_the_loggers_level(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="outlines_like"):
        model(FakeServer(chat_body("red")))("Pick.", Colour)
    assert caplog.records == []
