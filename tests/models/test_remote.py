"""Wire tests for Model / AsyncModel: the JSON actually sent, and answers read back."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
import threading
import time
from typing import Any, Literal

import httpx2
import openai
import pydantic
import pytest

import outlines_like.models as m
from outlines_like.adapters import ServerInfo, get_adapter_for
from outlines_like.adapters.base import ServerKind
from outlines_like.errors import (
    APIConnectionError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConstraintViolationError,
    GenerationError,
    NotFoundError,
    PermissionDeniedError,
    ProviderResponseError,
    RateLimitError,
    ServerError,
    TruncatedOutputWarning,
    UnsupportedConstraintError,
)
from outlines_like.inputs import Chat
from outlines_like.types import Regex, to_term
from tests.conftest import FakeServer, chat_body, chunk, sse


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.calls.append(seconds)


def policy(sleeps: Sleeps, **kw: Any) -> m.RetryPolicy:
    return m.RetryPolicy(sleep=sleeps, async_sleep=sleeps.asleep, jitter=False, **kw)


class Hero(pydantic.BaseModel):
    name: str
    age: int


# ----------------------------------------------------------------------------- request bodies

DIALECT_CASES = [
    ("sglang", Literal["red", "green"]),
    ("sglang", int),
    ("sglang", Hero),
    ("vllm", Literal["red", "green"]),
    ("vllm", Regex(r"[a-z]{3}")),
    ("vllm", Hero),
    ("llamacpp", int),
    ("llamacpp", Hero),
    ("llamacpp", dict),
    ("tgi", Hero),
    ("openai", Hero),
    ("ollama", dict),
]


@pytest.mark.parametrize(("server", "output_type"), DIALECT_CASES)
def test_body_carries_the_adapters_fields(server: ServerKind, output_type: object) -> None:
    fake = FakeServer(chat_body("1"))
    model = m.from_server(fake.client(), server, model_name="tiny")
    model("Hi", output_type, max_tokens=5, verify=False)  # a body test: "1" fits few types
    fields = get_adapter_for(server).constraint_fields(to_term(output_type), endpoint="chat")
    expected: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 5,
    }
    if "response_format" in fields:
        expected["response_format"] = fields["response_format"]
    expected.update(fields.get("extra_body", {}))
    assert fake.sent == json.loads(json.dumps(expected))


@pytest.mark.parametrize(
    ("server", "key", "value"),
    [
        ("sglang", "regex", "red|green"),
        ("vllm", "structured_outputs", {"choice": ["red", "green"]}),
    ],
)
def test_known_dialect_keys(server: ServerKind, key: str, value: object) -> None:
    fake = FakeServer(chat_body("red"))
    model = m.from_server(fake.client(), server, model_name="tiny")
    assert model("Colour?", Literal["red", "green"]) == "red"
    assert fake.sent[key] == value


def test_free_text_sends_no_constraint() -> None:
    fake = FakeServer(chat_body("hello"))
    model = m.from_vllm(fake.client(), "tiny")
    assert model("Hi", temperature=0.5, seed=3) == "hello"
    assert fake.sent == {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 0.5,
        "seed": 3,
    }


def test_callers_dicts_are_never_mutated() -> None:
    fake = FakeServer(chat_body("red"))
    model = m.from_sglang(fake.client(), "tiny")
    extra = {"top_k": 5, "nested": {"a": [1]}}
    kwargs: dict[str, Any] = {"extra_body": extra, "max_tokens": 4, "stop": ["\n"]}
    chat = Chat([{"role": "user", "content": "Colour?"}])
    before = (copy.deepcopy(kwargs), copy.deepcopy(chat.messages))
    model(chat, Literal["red", "green"], **kwargs)
    assert (kwargs, chat.messages) == before
    assert kwargs["extra_body"] is extra
    assert fake.sent["top_k"] == 5
    assert fake.sent["regex"] == "red|green"
    assert fake.sent["nested"] == {"a": [1]}


def test_image_prompt_on_the_wire() -> None:
    from PIL import Image as PILImage

    from outlines_like.inputs import Image

    fake = FakeServer(chat_body("a red square"))
    model = m.from_vllm(fake.client(), "tiny")
    model(["What is this?", Image(PILImage.new("RGB", (1, 1)))])
    [message] = fake.sent["messages"]
    assert message["role"] == "user"
    assert message["content"][0] == {"type": "text", "text": "What is this?"}
    assert message["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_unknown_kwargs_go_in_extra_body() -> None:
    fake = FakeServer(chat_body("x"))
    model = m.from_vllm(fake.client(), "tiny")
    model("Hi", top_k=7, min_p=0.1, repetition_penalty=1.1)
    assert fake.sent["top_k"] == 7
    assert fake.sent["min_p"] == 0.1
    assert fake.sent["repetition_penalty"] == 1.1


@pytest.mark.parametrize(
    ("server", "output_type", "kwargs", "match"),
    [
        (
            "sglang",
            Literal["a", "b"],
            {"extra_body": {"regex": "x"}},
            r"extra_body key\(s\) \['regex'\]",
        ),
        ("sglang", Hero, {"response_format": {"type": "json_object"}}, "response_format"),
        ("vllm", int, {"extra_body": {"structured_outputs": {}}}, "structured_outputs"),
        ("vllm", None, {"top_k": 1, "extra_body": {"top_k": 2}}, "top_k"),
    ],
)
def test_conflicting_constraint_keys_are_an_error(
    server: ServerKind, output_type: object, kwargs: dict[str, Any], match: str
) -> None:
    fake = FakeServer()
    model = m.from_server(fake.client(), server, model_name="tiny")
    with pytest.raises(ValueError, match=match):
        model("Hi", output_type, **kwargs)
    assert fake.bodies == []


def test_callers_own_response_format_passes_without_output_type() -> None:
    fake = FakeServer(chat_body("{}"))
    model = m.from_vllm(fake.client(), "tiny")
    model("Hi", response_format={"type": "json_object"})
    assert fake.sent["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n": 0}, ValueError, "n must be"),
        ({"n": "2"}, ValueError, "n must be"),
        ({"messages": []}, TypeError, "first argument"),
        ({"stream": True}, TypeError, "model.stream"),
        ({"model": 3}, TypeError, "model= must be a str"),
        ({"extra_body": [1]}, TypeError, "extra_body must be a dict"),
    ],
)
def test_bad_kwargs_fail_before_sending(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    fake = FakeServer()
    model = m.from_vllm(fake.client(), "tiny")
    with pytest.raises(error, match=match):
        model("Hi", **kwargs)
    assert fake.requests == []


def test_unsupported_type_fails_before_sending() -> None:
    fake = FakeServer()
    model = m.from_openai(fake.client(), "gpt")
    with pytest.raises(UnsupportedConstraintError):
        model("Hi", Literal["a", "b"])
    assert fake.requests == []


# ----------------------------------------------------------------------------- model ids


def test_model_name_per_call_and_default() -> None:
    fake = FakeServer(models=("a", "b"))
    model = m.from_vllm(fake.client(), "chosen")
    model("x")
    assert fake.sent["model"] == "chosen"
    model("x", model="override")
    assert fake.sent["model"] == "override"


def test_single_served_model_is_used_and_listed_once() -> None:
    fake = FakeServer(models=("only",))
    model = m.from_vllm(fake.client())
    model("x")
    model("y")
    assert fake.sent["model"] == "only"
    assert [r.url.path for r in fake.requests].count("/v1/models") == 1


def test_several_models_and_none_chosen_is_an_error() -> None:
    fake = FakeServer(models=("a", "b"))
    model = m.from_vllm(fake.client())
    with pytest.raises(ValueError, match=r"serves 2 models \('a', 'b'\).*model_name="):
        model("x")
    assert model("x", model="b") == "ok"


def test_unlistable_models_say_what_to_do() -> None:
    unlisted = FakeServer(models=None)  # GET /v1/models is a 404
    with pytest.raises(
        NotFoundError, match=r"could not list the vllm server's models at http://.*model_name="
    ):
        m.from_vllm(unlisted.client())("x")
    with pytest.raises(ValueError, match="lists no models"):
        m.from_vllm(FakeServer(models=()).client())("x")


def test_detection_is_lazy_and_cached() -> None:
    fake = FakeServer(chat_body("7"), chat_body("8"), models=("tiny",), owned_by="vllm")
    model = m.from_server(fake.client())
    assert fake.requests == []
    assert model(f"x{1}", int) == "7"
    assert model.server == "vllm"
    assert model("x", int) == "8"
    chat = "/v1/chat/completions"
    assert fake.paths == ["/v1/models", "/version", chat, chat]  # no probe the second time
    assert "structured_outputs" in fake.sent  # /version unknown: vLLM's newest dialect


async def test_async_detection() -> None:
    fake = FakeServer(chat_body("7"), models=("tiny",), owned_by="sglang")
    amodel = m.from_server(fake.aclient())
    assert amodel.server is None
    amodel = m.from_server(fake.aclient())  # a fresh name: mypy forgets the narrowing
    assert await amodel("x", int) == "7"
    assert (await amodel.detect()).kind == "sglang"
    requests = len(fake.requests)
    assert amodel.server == "sglang"
    assert len(fake.requests) == requests
    assert fake.sent["model"] == "tiny"
    assert "regex" in fake.sent


# ----------------------------------------------------------------------------- answers


def test_realistic_vllm_answer() -> None:
    body = {
        "id": "chatcmpl-9531a56660a01b1f",
        "object": "chat.completion",
        "created": 1796017439,
        "model": "tiny",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": '{"name":"Ada","age":36}',
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "reasoning": None,
                },
                "logprobs": None,
                "finish_reason": "stop",
                "stop_reason": None,
                "token_ids": None,
            }
        ],
        "system_fingerprint": "vllm-0.32.0-aa38cf37",
        "usage": {
            "prompt_tokens": 13,
            "total_tokens": 37,
            "completion_tokens": 24,
            "prompt_tokens_details": None,
        },
    }
    fake = FakeServer(body, body)
    model = m.from_vllm(fake.client(), "tiny")
    assert model.parse("Hero?", Hero) == Hero(name="Ada", age=36)
    result = model.complete("Hero?", Hero)
    assert isinstance(result, m.Completion)
    assert result.finish_reason == "stop"
    assert result.usage == m.Usage(13, 24, 37)
    assert result.reasoning is None
    assert model.usage == m.Usage(26, 48, 74)


@pytest.mark.parametrize(
    ("fields", "content", "reasoning", "answer"),
    [
        ({"reasoning_content": "hmm"}, "42", "hmm", "42"),
        ({"reasoning": "let me see"}, "42", "let me see", "42"),
        ({}, "<think>hmm</think>\n42", "hmm", "42"),
        ({}, "thinking...</think>42", "thinking...", "42"),
        ({}, "42", None, "42"),
    ],
)
def test_reasoning_is_split_off(
    fields: dict[str, Any], content: str, reasoning: str | None, answer: str
) -> None:
    fake = FakeServer(chat_body(content, **fields), chat_body(content, **fields))
    model = m.from_vllm(fake.client(), "tiny")
    assert model.parse("n?", int) == int(answer)
    result = model.complete("n?")
    assert isinstance(result, m.Completion)
    assert (result.reasoning, result.text) == (reasoning, answer)


def test_refusal_is_a_generation_error() -> None:
    fake = FakeServer(chat_body(None, refusal="I can't help with that."))
    model = m.from_openai(fake.client(), "gpt")
    with pytest.raises(GenerationError, match="refused") as info:
        model("x", Hero)
    assert info.value.reason == "refusal"
    assert info.value.text == "I can't help with that."


def test_content_filter_is_a_generation_error() -> None:
    fake = FakeServer(chat_body("partial", finish="content_filter"))
    model = m.from_openai(fake.client(), "gpt")
    with pytest.raises(GenerationError, match="content filter") as info:
        model("x")
    assert info.value.reason == "content_filter"


def test_truncated_constrained_output() -> None:
    """One rule for every method: a cut answer that does not fit raises; one that fits warns."""
    cut = chat_body('{"name": "Ad', finish="length")
    fake = FakeServer(cut, cut, cut, cut, chat_body("12", finish="length"))
    model = m.from_vllm(fake.client(), "tiny")
    with pytest.raises(GenerationError, match="max_tokens") as info:
        model.parse("Hero?", Hero, max_tokens=5)
    assert info.value.reason == "length"
    with pytest.raises(GenerationError, match="max_tokens") as info:
        model("Hero?", Hero, max_tokens=5)
    assert info.value.reason == "length"
    with pytest.raises(GenerationError, match="max_tokens"):
        model.complete("Hero?", Hero)
    assert model("Hi") == '{"name": "Ad'  # free text: nothing to check (filterwarnings=error)
    with pytest.warns(TruncatedOutputWarning, match="max_tokens") as record:
        assert model("Number?", int, max_tokens=1) == "12"  # fits, but may be cut short
    assert record[0].filename == __file__  # points at the caller's line


@pytest.mark.parametrize(
    "arguments",
    ['{"city": "Paris", "days": 2}', {"city": "Paris", "days": 2}],
    ids=["json-string", "tgi-object"],
)
def test_tool_calls(arguments: object) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "weather", "arguments": arguments},
    }
    fake = FakeServer(chat_body(None, finish="tool_calls", tool_calls=[call]))
    model = m.from_vllm(fake.client(), "tiny")
    result = model.complete(
        "Weather?", tools=[{"type": "function", "function": {"name": "weather"}}]
    )
    assert isinstance(result, m.Completion)
    assert len(result.tool_calls) == 1
    tool_call = result.tool_calls[0]
    assert (tool_call.id, tool_call.name, tool_call.arguments) == (
        "call_1",
        "weather",
        {"city": "Paris", "days": 2},
    )
    assert result.text == ""


def test_tool_calls_in_text_are_read_when_tools_were_given() -> None:
    text = '<tool_call>{"name": "weather", "arguments": {"city": "Oslo"}}</tool_call>'
    fake = FakeServer(chat_body(text), chat_body(text))
    model = m.from_llamacpp(fake.client(), "tiny")
    tools = [{"type": "function", "function": {"name": "weather"}}]
    result = model.complete("Weather?", tools=tools)
    assert isinstance(result, m.Completion)
    assert [c.name for c in result.tool_calls] == ["weather"]
    assert result.text == ""
    assert model("Weather?") == text  # without tools the text is the answer


def test_n_gives_lists() -> None:
    body = chat_body("1", "2", "3")
    fake = FakeServer(body, body, body)
    model = m.from_vllm(fake.client(), "tiny")
    assert model("n?", int, n=3) == ["1", "2", "3"]
    assert fake.sent["n"] == 3
    assert model.parse("n?", int, n=3) == [1, 2, 3]
    results = model.complete("n?", n=3)
    assert isinstance(results, list)
    assert [r.text for r in results] == ["1", "2", "3"]


def test_answer_without_choices() -> None:
    fake = FakeServer(
        {"id": "x", "object": "chat.completion", "created": 0, "model": "t", "choices": []}
    )
    model = m.from_vllm(fake.client(), "tiny", retry=None)
    with pytest.raises(ProviderResponseError, match="without choices"):
        model("x")


def test_completions_endpoint() -> None:
    body = {
        "id": "c",
        "object": "text_completion",
        "created": 0,
        "model": "tiny",
        "choices": [{"index": 0, "text": " 42", "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
    }
    fake = FakeServer(body)
    model = m.from_llamacpp(fake.client(), "tiny", endpoint="completions")
    assert model("The answer is", Regex(r" [0-9]+")) == " 42"
    assert fake.requests[-1].url.path == "/v1/completions"
    assert fake.sent["prompt"] == "The answer is"
    assert "messages" not in fake.sent
    with pytest.raises(TypeError, match="endpoint='chat'"):
        model(Chat([{"role": "user", "content": "x"}]))


# ----------------------------------------------------------------------------- streaming


def test_stream_yields_answer_deltas_only() -> None:
    usage = {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}
    stream = sse(
        chunk(role="assistant"),
        chunk(reasoning_content="let me think"),
        chunk("<thi"),
        chunk("nk>more</think>"),
        chunk("4"),
        chunk("2", finish="stop"),
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "t",
            "choices": [],
            "usage": usage,
        },
    )
    fake = FakeServer(stream)
    model = m.from_vllm(fake.client(), "tiny")
    assert "".join(model.stream("n?", int)) == "42"
    assert fake.sent["stream"] is True
    assert model.usage == m.Usage(4, 6, 10)


def test_stream_checks_arguments_eagerly_and_sends_lazily() -> None:
    fake = FakeServer(sse(chunk("a", finish="stop")))
    model = m.from_vllm(fake.client(), "tiny")
    with pytest.raises(ValueError, match="n=2"):
        model.stream("x", n=2)
    iterator = model.stream("x")
    assert fake.requests == []
    assert list(iterator) == ["a"]


def test_stream_refusal_and_truncation() -> None:
    fake = FakeServer(
        sse(chunk(refusal="No."), chunk(finish="stop")),
        sse(chunk("12"), chunk(finish="length")),
    )
    model = m.from_openai(fake.client(), "gpt")
    with pytest.raises(GenerationError, match="refused"):
        list(model.stream("x"))
    model = m.from_vllm(fake.client(), "tiny")
    with pytest.warns(TruncatedOutputWarning):
        assert list(model.stream("x", int)) == ["12"]


def test_error_event_mid_stream_is_a_server_error() -> None:
    text = f"data: {json.dumps(chunk('a'))}\n\n" + 'data: {"error": {"message": "engine died"}}\n\n'
    broken = httpx2.Response(200, headers={"content-type": "text/event-stream"}, text=text)
    fake = FakeServer(broken)
    model = m.from_vllm(fake.client(), "tiny")
    pieces: list[str] = []
    with pytest.raises(ServerError, match="engine died"):
        pieces.extend(model.stream("x"))
    assert pieces == ["a"]
    assert len(fake.bodies) == 1  # mid-stream errors are not retried


async def test_async_stream() -> None:
    fake = FakeServer(sse(chunk("<think>a</think>"), chunk("b"), chunk("c", finish="stop")))
    amodel = m.from_vllm(fake.aclient(), "tiny")
    pieces = [d async for d in amodel.stream("x")]
    assert "".join(pieces) == "bc"
    with pytest.raises(ValueError, match="n=3"):
        amodel.stream("x", n=3)


# ----------------------------------------------------------------------------- errors and retries


@pytest.mark.parametrize(
    ("status", "error", "retryable"),
    [
        (400, BadRequestError, False),
        (401, AuthenticationError, False),
        (403, PermissionDeniedError, False),
        (404, NotFoundError, False),
        (409, BadRequestError, False),
        (422, BadRequestError, False),
        (429, RateLimitError, True),
        (500, ServerError, True),
        (503, ServerError, True),
    ],
)
def test_status_errors_are_translated(status: int, error: type[Exception], retryable: bool) -> None:
    sleeps = Sleeps()
    answer = httpx2.Response(
        status, headers={"x-request-id": "req-9"}, json={"error": {"message": "nope"}}
    )
    fake = FakeServer(*[answer] * 3)
    model = m.from_vllm(fake.client(), "tiny", retry=policy(sleeps))
    with pytest.raises(error, match="nope") as info:
        model("x")
    assert info.value.status_code == status  # type: ignore[attr-defined]
    assert info.value.request_id == "req-9"  # type: ignore[attr-defined]
    assert info.value.retryable is retryable  # type: ignore[attr-defined]
    assert isinstance(info.value.__cause__, openai.APIStatusError)
    assert len(fake.bodies) == (3 if retryable else 1)


def test_429_with_retry_after_then_200() -> None:
    sleeps = Sleeps()
    limited = httpx2.Response(
        429, headers={"retry-after": "2"}, json={"error": {"message": "slow"}}
    )
    fake = FakeServer(limited, chat_body("done"))
    model = m.from_vllm(fake.client(), "tiny", retry=policy(sleeps))
    assert model("x") == "done"
    assert len(fake.bodies) == 2
    assert sleeps.calls == [2.0]


def test_500_three_times_gives_server_error_after_max_attempts() -> None:
    sleeps = Sleeps()
    fail = httpx2.Response(500, json={"error": {"message": "boom"}})
    fake = FakeServer(fail, fail, fail, chat_body("never"))
    model = m.from_vllm(fake.client(), "tiny", retry=policy(sleeps, initial_delay=0.5))
    with pytest.raises(ServerError, match="boom"):
        model("x")
    assert len(fake.bodies) == 3
    assert sleeps.calls == [0.5, 1.0]


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (httpx2.ConnectError("refused"), APIConnectionError),
        (httpx2.ReadTimeout("slow"), APITimeoutError),
    ],
)
def test_transport_errors_are_translated_and_retried(
    exc: Exception, error: type[Exception]
) -> None:
    sleeps = Sleeps()
    fake = FakeServer(exc, exc, chat_body("finally"), exc, exc)
    model = m.from_vllm(fake.client(), "tiny", retry=policy(sleeps, max_attempts=3))
    assert model("x") == "finally"
    assert len(fake.bodies) == 3
    model = m.from_vllm(fake.client(), "tiny", retry=policy(sleeps, max_attempts=2))
    with pytest.raises(error):
        model("x")


def test_clients_own_retries_are_turned_off() -> None:
    fail = httpx2.Response(500, json={"error": {"message": "boom"}})
    fake = FakeServer(fail, fail, fail)
    client = fake.client(max_retries=5)
    model = m.from_vllm(client, "tiny", retry=m.RetryPolicy(max_attempts=1))
    with pytest.raises(ServerError):
        model("x")
    assert len(fake.bodies) == 1  # not 6: the client's max_retries=5 does not stack
    assert model.client is client
    assert m.from_vllm(client, "tiny", retry=None)._client is client


def test_rate_limiter_is_consulted_per_attempt() -> None:
    now = [0.0]
    waits: list[float] = []
    limiter = m.RateLimiter(60, clock=lambda: now[0], sleep=waits.append)
    fake = FakeServer()
    model = m.from_vllm(fake.client(), "tiny", rate_limit=limiter)
    model("a")
    model("b")
    assert waits == [1.0]


def test_programmer_errors_are_not_relabelled() -> None:
    def broken(request: httpx2.Request) -> httpx2.Response:
        raise KeyError("bug")

    fake = FakeServer(broken)
    model = m.from_vllm(fake.client(), "tiny")
    with pytest.raises(KeyError):
        model("x")
    assert len(fake.bodies) == 1


async def test_async_retries_use_async_sleep() -> None:
    sleeps = Sleeps()
    limited = httpx2.Response(429, headers={"retry-after-ms": "1500"}, json={"error": "slow"})
    fake = FakeServer(limited, chat_body("7"))
    amodel = m.from_vllm(fake.aclient(), "tiny", retry=policy(sleeps))
    assert await amodel.parse("x", int) == 7
    assert sleeps.calls == [1.5]


async def test_async_errors() -> None:
    fake = FakeServer(*[httpx2.Response(404, json={"detail": "no such model"})])
    amodel = m.from_vllm(fake.aclient(), "tiny")
    with pytest.raises(NotFoundError, match="no such model"):
        await amodel("x")


# ----------------------------------------------------------------------------- batch


def echo(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    text = body["messages"][0]["content"]
    if text == "fail":
        return httpx2.Response(400, json={"error": {"message": f"bad item {text}"}})
    time.sleep(0.002 * (len(text) % 3))  # finish out of order
    return httpx2.Response(200, json=chat_body(text.upper()))


class InFlight:
    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            time.sleep(0.005)
            return echo(request)
        finally:
            with self.lock:
                self.now -= 1


def test_batch_keeps_order_and_bounds_concurrency() -> None:
    prompts = [f"p{i}" + "x" * (i % 5) for i in range(20)]
    counter = InFlight()
    fake = FakeServer(*[counter] * 20)
    model = m.from_vllm(fake.client(), "tiny")
    assert model.batch(prompts, max_concurrency=4) == [p.upper() for p in prompts]
    assert 1 < counter.peak <= 4
    assert model.usage.total_tokens == 5 * 20


def test_batch_failures() -> None:
    prompts = ["a", "fail", "c"]
    fake = FakeServer(*[echo] * 6)
    model = m.from_vllm(fake.client(), "tiny")
    with pytest.raises(BadRequestError, match="bad item fail"):
        model.batch(prompts)
    results = model.batch(prompts, return_exceptions=True)
    assert results[0] == "A"
    assert isinstance(results[1], BadRequestError)
    assert results[2] == "C"
    assert model.batch([]) == []
    with pytest.raises(ValueError, match="max_concurrency"):
        model.batch(["a"], max_concurrency=0)


async def test_async_batch_keeps_order_and_bounds_concurrency() -> None:
    state = {"now": 0, "peak": 0}

    async def handler(request: httpx2.Request) -> httpx2.Response:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0.001 * (len(request.content) % 3))
        state["now"] -= 1
        return echo(request)

    fake = FakeServer(*[handler] * 12)  # type: ignore[arg-type]  # MockTransport awaits it
    amodel = m.from_vllm(fake.aclient(), "tiny")
    prompts = [f"q{i}" for i in range(10)] + ["fail", "z"]
    with pytest.raises(BadRequestError):
        await amodel.batch(prompts, max_concurrency=3)
    fake.answers = [handler] * 12  # type: ignore[list-item]
    results = await amodel.batch(prompts, max_concurrency=3, return_exceptions=True)
    assert results[:10] == [p.upper() for p in prompts[:10]]
    assert isinstance(results[10], BadRequestError)
    assert results[11] == "Z"
    assert 1 < state["peak"] <= 3


# ----------------------------------------------------------------------------- async twins


async def test_async_twins() -> None:
    fake = FakeServer(chat_body("3"), chat_body("4"), chat_body("red"), chat_body("5", "6"))
    amodel = m.from_sglang(fake.aclient(), "tiny")
    assert await amodel("x", int) == "3"
    assert await amodel.parse("x", int) == 4
    result = await amodel.complete("x", Literal["red", "blue"])
    assert isinstance(result, m.Completion)
    assert result.text == "red"
    assert await amodel("x", n=2) == ["5", "6"]
    assert amodel.usage.total_tokens == 20


def test_parse_values() -> None:
    fake = FakeServer(chat_body("2024-05-01"), chat_body("true"))
    model = m.from_vllm(fake.client(), "tiny")
    assert model.parse("when?", dt.date) == dt.date(2024, 5, 1)
    assert model.parse("ok?", bool) is True


def test_repr_and_detect_with_fixed_server() -> None:
    fake = FakeServer()
    model = m.from_sglang(fake.client(), "tiny")
    assert repr(model) == "Model(server='sglang', model='tiny', endpoint='chat')"
    assert model.detect().kind == "sglang"
    assert fake.requests == []  # a named kind other than vLLM: nothing to ask


@pytest.mark.parametrize(
    ("version", "field"), [("0.8.5", "guided_regex"), ("0.12.0", "structured_outputs")]
)
def test_named_vllm_without_version_probes_the_version(version: str, field: str) -> None:
    fake = FakeServer(chat_body("7"), chat_body("8"), routes={"/version": {"version": version}})
    model = m.from_vllm(fake.client(), "tiny")
    assert model.server == "vllm"  # known before any request
    assert fake.requests == []
    assert model("x", int) == "7"
    assert field in fake.sent
    assert model.detect() == ServerInfo("vllm", version)
    assert model("x", int) == "8"
    assert fake.paths == ["/version", "/v1/chat/completions", "/v1/chat/completions"]


# ----------------------------------------------------------------------------- detection
# The answer belongs to the model; a server replaced behind the same URL is followed.

VLLM_ROUTES = {"/version": {"version": "0.32.0"}}
LLAMACPP_ROUTES = {"/props": {"default_generation_settings": {}, "total_slots": 1}}


def become_llamacpp(fake: FakeServer) -> None:
    fake.owned_by, fake.routes = "llamacpp", LLAMACPP_ROUTES


def test_server_is_none_before_detection_and_never_probes() -> None:
    fake = FakeServer(models=("tiny",), owned_by="vllm", routes=VLLM_ROUTES)
    model, amodel = m.from_server(fake.client()), m.from_server(fake.aclient())
    assert (model.server, amodel.server) == (None, None)
    assert fake.requests == []
    assert model.detect() == ServerInfo("vllm", "0.32.0", ("tiny",))
    assert model.server == "vllm"
    assert amodel.server is None  # each model asks for itself


def test_a_new_from_server_probes_anew() -> None:
    fake = FakeServer(models=("tiny",), owned_by="vllm", routes=VLLM_ROUTES)
    assert m.from_server(fake.client()).detect().kind == "vllm"
    become_llamacpp(fake)
    fresh = m.from_server(fake.client())
    assert fresh.detect() == ServerInfo("llamacpp", None, ("tiny",))
    fake.answers = [chat_body("7")]
    fresh("x", int)
    assert "grammar" in fake.sent or "json_schema" in fake.sent
    assert "structured_outputs" not in fake.sent


@pytest.mark.parametrize("failure", ["connection", "404"])
def test_existing_model_follows_a_replaced_server(failure: str) -> None:
    fake = FakeServer(chat_body("1"), models=("tiny",), owned_by="vllm", routes=VLLM_ROUTES)
    model = m.from_server(fake.client(), retry=m.RetryPolicy(max_attempts=1))
    assert model("x", int) == "1"
    assert "structured_outputs" in fake.sent
    become_llamacpp(fake)
    if failure == "404":
        gone: Any = httpx2.Response(404, json={"error": {"message": "Not Found"}})
    else:
        gone = httpx2.ConnectError("connection refused")
    fake.answers = [gone, chat_body("2")]
    assert model("x", int) == "2"  # detected again once, then sent in llama.cpp's dialect
    assert model.server == "llamacpp"
    assert "structured_outputs" not in fake.sent
    assert "grammar" in fake.sent or "json_schema" in fake.sent


def test_existing_model_follows_a_replaced_server_that_answers_200() -> None:
    """A server that ignores the fields it was sent answers 200: the misfit triggers detection."""
    fake = FakeServer(chat_body("1"), models=("tiny",), owned_by="vllm", routes=VLLM_ROUTES)
    model = m.from_server(fake.client())
    assert model("x", int) == "1"
    become_llamacpp(fake)
    fake.answers = [chat_body("not a number"), chat_body("2")]
    assert model("x", int) == "2"
    assert model.server == "llamacpp"
    assert "grammar" in fake.sent or "json_schema" in fake.sent


def test_a_misfit_from_the_same_server_is_reported_not_resent() -> None:
    fake = FakeServer(chat_body("1"), chat_body("x"), models=("tiny",), owned_by="vllm")
    model = m.from_server(fake.client())
    assert model("x", int) == "1"
    with pytest.raises(ConstraintViolationError):
        model("x", int)
    assert len(fake.bodies) == 2  # probed again, found the same server, did not send again


async def test_existing_async_model_follows_a_replaced_server() -> None:
    fake = FakeServer(chat_body("1"), models=("tiny",), owned_by="vllm", routes=VLLM_ROUTES)
    amodel = m.from_server(fake.aclient(), retry=m.RetryPolicy(max_attempts=1))
    assert await amodel("x", int) == "1"
    become_llamacpp(fake)
    fake.answers = [httpx2.ConnectError("connection refused"), chat_body("2")]
    assert await amodel("x", int) == "2"
    assert amodel.server == "llamacpp"
    assert "structured_outputs" not in fake.sent


def test_same_server_after_a_failure_gives_the_error_after_one_probe() -> None:
    fake = FakeServer(models=("tiny",), owned_by="sglang")
    model = m.from_server(fake.client(), retry=None)
    model.detect()
    fake.answers = [httpx2.Response(404, json={"error": {"message": "no such model"}})]
    probes = len(fake.requests)
    with pytest.raises(NotFoundError, match="no such model"):
        model("x")
    assert fake.paths[probes:] == ["/v1/chat/completions", "/v1/models"]  # one new probe
    named = m.from_sglang(fake.client(), "tiny", retry=None)  # named: never re-detected
    fake.answers = [httpx2.Response(404, json={"error": {"message": "no such model"}})]
    probes = len(fake.requests)
    with pytest.raises(NotFoundError):
        named("x")
    assert fake.paths[probes:] == ["/v1/chat/completions"]


def test_server_down_names_its_url() -> None:
    fake = FakeServer()
    fake.down = True
    model = m.from_server(fake.client(), retry=m.RetryPolicy(max_attempts=1))
    with pytest.raises(APIConnectionError, match=r"could not reach the server at http://127") as e:
        model("x")
    assert "generic" not in str(e.value)
    assert "model_name" not in str(e.value)
    named = m.from_server(fake.client(), model_name="tiny", retry=m.RetryPolicy(max_attempts=1))
    with pytest.raises(APIConnectionError, match=r"server at http://127\.0\.0\.1:8000/v1"):
        named("x")


def test_llamacpp_refuses_a_model_it_does_not_serve() -> None:
    fake = FakeServer(models=("tiny",), owned_by="llamacpp")
    model = m.from_server(fake.client())
    with pytest.raises(NotFoundError, match=r"'gpt-4o' is not served .* it serves 'tiny'"):
        model("x", model="gpt-4o")
    assert fake.bodies == []  # refused before sending
    assert model("x", model="tiny") == "ok"


class Adventurer(pydantic.BaseModel):
    name: str
    level: int


def _hero_stream() -> httpx2.Response:
    pieces = ['{"na', 'me":"Ad', 'a","lev', 'el":1', "2}"]
    return sse(*(chunk(p) for p in pieces), chunk(finish="stop"))


def test_stream_parse_yields_growing_objects_then_the_validated_one() -> None:
    fake = FakeServer(_hero_stream())
    model = m.from_vllm(fake.client(), "tiny")
    values = list(model.stream_parse("x", Adventurer))
    assert values[-1] == Adventurer(name="Ada", level=12)
    assert "json" in fake.sent["structured_outputs"]
    names = [getattr(v, "name", None) for v in values]
    assert "Ad" in names or "Ada" in names
    assert len(values) >= 3


async def test_async_stream_parse() -> None:
    fake = FakeServer(_hero_stream())
    amodel = m.from_vllm(fake.aclient(), "tiny")
    values = [v async for v in amodel.stream_parse("x", Adventurer)]
    assert values[-1] == Adventurer(name="Ada", level=12)
    assert len(values) >= 3


def test_thinking_model_constrained_from_token_zero_warns() -> None:
    from outlines_like.errors import ThinkingConstrainedWarning

    fake = FakeServer(chat_body("12"), chat_body("12"), chat_body("12"))
    model = m.from_llamacpp(fake.client(), "deepseek-r1-distill-qwen-7b")
    with pytest.warns(ThinkingConstrainedWarning, match="llamacpp"):
        model("x", int)
    model("x")  # free text: nothing to warn about
    quiet = m.from_vllm(fake.client(), "deepseek-r1-distill-qwen-7b", reasoning_parser=True)
    quiet("x", int)


def test_re_detection_happens_once_per_failing_call() -> None:
    fake = FakeServer(chat_body("1"), models=("tiny",), owned_by="vllm", routes=VLLM_ROUTES)
    model = m.from_server(fake.client(), retry=m.RetryPolicy(max_attempts=1))
    model("x", int)
    become_llamacpp(fake)
    gone = httpx2.Response(404, json={"error": {"message": "Not Found"}})
    fake.answers = [gone, gone, gone]
    start = len(fake.requests)
    with pytest.raises(NotFoundError):
        model("x", int)
    # the request, one detection (the listing says llamacpp), the request in the new dialect
    assert fake.paths[start:] == ["/v1/chat/completions", "/v1/models", "/v1/chat/completions"]
    assert model.server == "llamacpp"
