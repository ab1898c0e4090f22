"""The pure core: preparing calls, building requests, reading answers, translating errors."""

from __future__ import annotations

import email.utils
from typing import Any, Literal

import httpx
import httpx2
import openai
import pytest

from outlines_like.adapters.base import ConstraintFields, Endpoint, ServerKind
from outlines_like.adapters.detect import ProbeAnswer
from outlines_like.errors import (
    APIConnectionError,
    APITimeoutError,
    GenerationError,
    ProviderResponseError,
    RateLimitError,
    ServerError,
)
from outlines_like.messages import Usage
from outlines_like.models._call import Call, Constraint, ListModels, Target
from outlines_like.models._core import ModelCore
from outlines_like.models._errors import parse_retry_after, translate, translate_errors
from outlines_like.models.detection import Probe
from outlines_like.models.retry import RateLimiter
from outlines_like.types import Regex, Term


class FakeAdapter:
    """Sends the term's class name in ``extra_body.kind`` (and a response_format for JSON)."""

    def __init__(self, kind: ServerKind = "generic") -> None:
        self._kind: ServerKind = kind
        self.calls = 0

    @property
    def kind(self) -> ServerKind:
        return self._kind

    def constraint_fields(self, term: Term | None, *, endpoint: Endpoint) -> ConstraintFields:
        self.calls += 1
        if term is None:
            return {}
        return {"extra_body": {"kind": type(term).__name__, "endpoint": endpoint}}


class DummyClient:
    base_url = "http://test/v1"

    def with_options(self, **kw: Any) -> DummyClient:
        return self


def core(**kw: Any) -> ModelCore[DummyClient]:
    kw.setdefault("adapter", FakeAdapter())
    return ModelCore(DummyClient(), model_name="m", **kw)


def prepared(
    c: ModelCore[Any], prompt: object = "hi", output_type: object = None, **kw: Any
) -> Call:
    return c.prepare(prompt, Constraint.of(output_type), kw, stream=False)


def target(c: ModelCore[Any]) -> Target:
    ready = c.ready_now(None)
    assert ready is not None
    return ready[0]


# ----------------------------------------------------------------------------- building


def test_fields_are_built_once_per_term() -> None:
    adapter = FakeAdapter()
    c = core(adapter=adapter)
    for _ in range(3):
        params = c.build_request(prepared(c, "hi", int), target(c), "m").params
    assert params["extra_body"] == {"kind": "Regex", "endpoint": "chat"}
    assert adapter.calls == 1


def test_build_request_merges_into_copies() -> None:
    c = core()
    extra = {"top_k": 2}
    call = prepared(c, "hi", Regex("a+"), extra_body=extra, temperature=0.0, min_p=0.1)
    request = c.build_request(call, target(c), "m")
    assert request.endpoint == "chat"
    assert request.params == {
        "messages": [{"role": "user", "content": "hi"}],
        "model": "m",
        "temperature": 0.0,
        "extra_body": {"top_k": 2, "min_p": 0.1, "kind": "Regex", "endpoint": "chat"},
    }
    assert extra == {"top_k": 2}
    assert request.params["extra_body"] is not extra


def test_completions_endpoint_prompt() -> None:
    c = core(endpoint="completions")
    request = c.build_request(prepared(c, "Once", None, best_of=2), target(c), "m")
    assert request.params == {"prompt": "Once", "model": "m", "best_of": 2}
    assert request.endpoint == "completions"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"server": "mystery"}, ValueError, "server='mystery'"),
        ({"endpoint": "responses"}, ValueError, "endpoint="),
        ({"model_name": 3}, TypeError, "model_name must be a str"),
        ({"retry": 3}, TypeError, "retry must be a RetryPolicy"),
        ({"rate_limit": "fast"}, TypeError, "rate_limit must be"),
    ],
)
def test_constructor_checks(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ModelCore(DummyClient(), **kwargs)


def test_rate_limit_number_becomes_a_limiter() -> None:
    limiter = ModelCore(DummyClient(), rate_limit=600).rate_limiter
    assert isinstance(limiter, RateLimiter)
    assert limiter.requests_per_minute == 600


# ----------------------------------------------------------------------------- resolving


def run(flow: Any, answers: Any) -> Any:
    steps = []
    try:
        step = next(flow)
        while True:
            steps.append(type(step))
            step = flow.send(answers[type(step)])
    except StopIteration as stop:
        return stop.value, steps


def test_resolve_flow_detects_and_lists_once() -> None:
    from outlines_like.adapters.base import ServerInfo

    c: ModelCore[DummyClient] = ModelCore(DummyClient())
    listing = {"data": [{"owned_by": "vllm"}], "version": "0.32.0"}  # also read as /version
    answers = {Probe: ProbeAnswer(200, listing), ListModels: ("only",)}
    (tgt, model), steps = run(c.resolve_flow(None), answers)
    assert (tgt.info, model) == (ServerInfo("vllm", "0.32.0"), "only")
    assert steps == [Probe, Probe, ListModels]  # /v1/models, /version, then the model list
    assert c.ready_now(None) == (tgt, "only")
    (_, model), steps = run(c.resolve_flow("other"), answers)
    assert (model, steps) == ("other", [])


def test_unreachable_detection_is_asked_again() -> None:
    c: ModelCore[DummyClient] = ModelCore(DummyClient(), model_name="m")
    (tgt, _), steps = run(c.resolve_flow(None), {Probe: ProbeAnswer(None)})
    assert (tgt.info.kind, steps) == ("generic", [Probe])
    assert c.ready_now(None) is None  # "unreachable" is no answer: ask detection again
    sglang = ProbeAnswer(200, {"data": [{"id": "m", "owned_by": "sglang"}]})
    (tgt, _), steps = run(c.resolve_flow(None), {Probe: sglang})
    assert (tgt.info.kind, steps) == ("sglang", [Probe])
    assert c.ready_now(None) is not None


# ----------------------------------------------------------------------------- reading


def message_choice(content: str | None, finish: str = "stop", **fields: Any) -> dict[str, Any]:
    return {"message": {"content": content, **fields}, "finish_reason": finish}


def test_read_dict_answer() -> None:
    c = core()
    answer = {"choices": [message_choice("<think>a</think>b")], "usage": {"prompt_tokens": 2}}
    [completion] = c.read(prepared(c), answer)
    assert (completion.text, completion.reasoning, completion.usage) == ("b", "a", Usage(2, 0, 2))
    assert c.usage == Usage(2, 0, 2)


@pytest.mark.parametrize(
    ("answer", "error", "match"),
    [
        ({"choices": None}, ProviderResponseError, "without choices"),
        ({"choices": [{"finish_reason": "stop"}]}, ProviderResponseError, "no message"),
        ({"choices": [message_choice("x", reasoning_content=5)]}, ProviderResponseError, "string"),
        ({"choices": [message_choice(None, refusal="no")]}, GenerationError, "refused"),
        ({"choices": [message_choice("x", "content_filter")]}, GenerationError, "content filter"),
    ],
)
def test_read_bad_answers(answer: dict[str, Any], error: type[Exception], match: str) -> None:
    c = core()
    with pytest.raises(error, match=match):
        c.read(prepared(c), answer)


def test_stream_view_with_dict_chunks() -> None:
    c = core()
    reader = c.stream_view(c.prepare("x", Constraint.of(None), {}, stream=True))
    deltas = [
        reader.feed({"choices": [{"delta": {"reasoning": "think"}}]}),
        reader.feed({"choices": [{"delta": {"content": "a"}}]}),
        reader.feed({"choices": [{"delta": {"content": "b"}, "finish_reason": "stop"}]}),
        reader.feed({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}),
    ]
    assert deltas == ["", "a", "b", ""]
    assert reader.finish() == ""
    assert reader.text == "ab"
    assert c.usage == Usage(1, 2, 3)


@pytest.mark.parametrize("n", [1, 2])
def test_values_and_texts(n: int) -> None:
    c = core()
    call = prepared(c, "x", Literal["a", "b"], n=n)
    completions = c.read(call, {"choices": [message_choice("a")] * n})
    assert c.texts(call, completions, stacklevel=1) == ("a" if n == 1 else ["a"] * n)
    assert c.values(call, completions) == ("a" if n == 1 else ["a"] * n)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "-4"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": email.utils.formatdate(1030.0, usegmt=True)}, 30.0),
        ({"retry-after": email.utils.formatdate(900.0, usegmt=True)}, 0.0),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers, now=lambda: 1000.0) == expected


def status_error(status: int, headers: dict[str, str], body: object) -> openai.APIStatusError:
    request = httpx2.Request("POST", "http://x/v1/chat/completions")
    response = httpx2.Response(status, headers=headers, json=body, request=request)
    return openai.APIStatusError("Error", response=response, body=body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"message": "plain"}, "plain"),
        ({"error": {"message": "nested"}}, "nested"),
        ({"error": "tgi style", "error_type": "validation"}, "tgi style"),
        ({"detail": "fastapi"}, "fastapi"),
        ({"detail": [{"loc": ["body"], "msg": "field required"}]}, "field required"),
    ],
)
def test_error_messages_from_any_server(body: object, message: str) -> None:
    error = translate(status_error(400, {}, body))
    assert error is not None
    assert message in str(error)


def test_unreadable_2xx_is_a_provider_response_error() -> None:
    request = httpx2.Request("POST", "http://x/v1/chat/completions")
    response = httpx2.Response(200, json=[1], request=request)
    error = translate(openai.APIResponseValidationError(response=response, body=[1]))
    assert isinstance(error, ProviderResponseError)
    assert error.status_code == 200


def test_server_error_keeps_retry_after() -> None:
    error = translate(status_error(503, {"retry-after": "4", "x-request-id": "r1"}, {}))
    assert isinstance(error, ServerError)
    assert error.retry_after == 4.0  # type: ignore[attr-defined]
    assert error.request_id == "r1"
    limited = translate(status_error(429, {"retry-after": "2"}, {}))
    assert isinstance(limited, RateLimitError)
    assert limited.retry_after == 2.0


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (openai.APITimeoutError(httpx2.Request("GET", "http://x")), APITimeoutError),
        (openai.APIConnectionError(request=httpx2.Request("GET", "http://x")), APIConnectionError),
        (httpx.ConnectError("no"), APIConnectionError),
        (httpx2.ReadTimeout("slow"), APITimeoutError),
        (httpx.ReadTimeout("slow"), APITimeoutError),
        (ValueError("bug"), None),
        (KeyError("bug"), None),
    ],
)
def test_translate(exc: Exception, expected: type[Exception] | None) -> None:
    error = translate(exc)
    assert (None if error is None else type(error)) is expected


def test_translate_errors_chains_and_passes_programmer_errors() -> None:
    with pytest.raises(APIConnectionError) as info, translate_errors():
        raise httpx2.ConnectError("refused")
    assert isinstance(info.value.__cause__, httpx2.ConnectError)
    with pytest.raises(TypeError), translate_errors():
        raise TypeError("bug")
