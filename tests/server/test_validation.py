"""Request validation without HTTP: bodies in, validated requests or OpenAI-style errors out."""

from __future__ import annotations

from typing import Any

import pytest

from outlines_like.server.config import ServerConfig
from outlines_like.server.dialects import RequestError
from outlines_like.server.validation import (
    ChatRequest,
    check_model,
    parse_body,
    validate_chat,
    validate_completion,
)
from outlines_like.types import Regex

CONFIG = ServerConfig(max_tokens_limit=512, max_n=4)
MESSAGES = [{"role": "user", "content": "hi"}]
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


def _refused(call: Any, *args: Any) -> RequestError:
    with pytest.raises(RequestError) as info:
        call(*args)
    return info.value


def test_a_chat_request_with_every_common_field() -> None:
    body = {
        "model": "tiny",
        "messages": [
            {"role": "developer", "content": "be brief"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
        ],
        "max_completion_tokens": 7,
        "temperature": 0.5,
        "top_p": 0.9,
        "n": 2,
        "seed": 3,
        "stop": "x",
        "stream": True,
        "stream_options": {"include_usage": True},
        "regex": "[0-9]+",
        "chat_template_kwargs": {"enable_thinking": False},
    }
    request = validate_chat(body, CONFIG)
    assert isinstance(request, ChatRequest)
    params = request.common.params
    assert (params.max_tokens, params.temperature, params.top_p, params.seed, params.stop) == (
        7,
        0.5,
        0.9,
        3,
        ("x",),
    )
    assert (request.common.n, request.common.stream, request.common.include_usage) == (
        2,
        True,
        True,
    )
    assert request.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "ab"},
    ]
    assert request.constraint is not None
    assert request.constraint.term == Regex("[0-9]+")
    assert request.template_kwargs == {"enable_thinking": False}
    assert request.tools is None


def test_defaults_come_from_the_config() -> None:
    request = validate_chat({"messages": MESSAGES}, CONFIG)
    assert request.common.params.max_tokens == CONFIG.default_max_tokens
    assert (request.common.n, request.common.stream, request.constraint) == (1, False, None)


@pytest.mark.parametrize(
    ("extra", "param", "code"),
    [
        ({"bogus": 1}, "bogus", "unknown_field"),
        ({"max_tokens": 513}, "max_tokens", "invalid_request"),
        ({"n": 5}, "n", "invalid_request"),
        ({"temperature": "hot"}, "temperature", "invalid_request"),
        ({"stop": [1]}, "stop", "invalid_request"),
        ({"seed": True}, "seed", "invalid_request"),
        ({"logprobs": "yes"}, "logprobs", "invalid_request"),
        ({"top_logprobs": 3}, "top_logprobs", "invalid_request"),
        ({"allowed_sample": 3}, "allowed_sample", "invalid_request"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "invalid_request"),
        ({"logprobs": True, "allowed_sample": 65}, "allowed_sample", "invalid_request"),
        ({"presence_penalty": 1.0}, "presence_penalty", "invalid_request"),
        ({"stream_options": {"x": 1}}, "stream_options", "invalid_request"),
        ({"chat_template_kwargs": [1]}, "chat_template_kwargs", "invalid_request"),
        ({"tool_choice": "required"}, "tool_choice", "invalid_request"),
        ({"tools": [{"type": "function"}]}, "tools[0]", "invalid_request"),
        ({"tools": [WEATHER], "tool_choice": "required", "regex": "a"}, "tool_choice", "conflict"),
        ({"regex": "a", "guided_regex": "b"}, None, "conflict"),
        ({"regex": "[a-"}, "regex", "invalid_constraint"),
    ],
)
def test_bad_chat_fields(extra: dict[str, Any], param: str | None, code: str) -> None:
    error = _refused(validate_chat, {"messages": MESSAGES, **extra}, CONFIG)
    assert error.status == 400
    assert error.code == code
    if param is not None:
        assert error.param == param


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        (["x"], "messages[0]"),
        ([{"role": "robot", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": 3}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "messages[0].content"),
    ],
)
def test_bad_messages(messages: Any, param: str) -> None:
    assert _refused(validate_chat, {"messages": messages}, CONFIG).param == param


def test_a_forced_tool_choice_becomes_the_constraint() -> None:
    body = {"messages": MESSAGES, "tools": [WEATHER], "tool_choice": "required"}
    request = validate_chat(body, CONFIG)
    assert request.tools == [WEATHER]
    assert request.constraint is not None
    assert request.constraint.field == "tool_choice"
    body["tool_choice"] = "none"
    assert validate_chat(body, CONFIG).tools is None


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [("a", ["a"]), (["a", "b"], ["a", "b"]), ([5, 6], [[5, 6]])],
)
def test_completion_prompt_forms(prompt: Any, expected: list[Any]) -> None:
    request = validate_completion({"prompt": prompt, "regex": "x"}, CONFIG, vocab_size=10)
    assert request.prompts == expected
    assert request.constraint is not None


@pytest.mark.parametrize(
    ("prompt", "match"),
    [
        ([5, 10], "outside the vocabulary"),
        ([], "prompt must be"),
        ([1, "a"], "prompt must be"),
        (["a"] * 5, "at most 4 prompts"),
    ],
)
def test_bad_completion_prompts(prompt: Any, match: str) -> None:
    error = _refused(validate_completion, {"prompt": prompt}, CONFIG, 10)
    assert error.param == "prompt"
    assert match in error.message


def test_chat_logprobs_become_sampling_params() -> None:
    request = validate_chat(
        {"messages": MESSAGES, "logprobs": True, "top_logprobs": 4, "allowed_sample": 9}, CONFIG
    )
    assert request.common.params.logprobs == 4
    assert request.common.params.allowed_sample == 9
    plain = validate_chat({"messages": MESSAGES, "logprobs": False}, CONFIG)
    assert plain.common.params.logprobs is None
    bare = validate_chat({"messages": MESSAGES, "logprobs": True}, CONFIG)
    assert bare.common.params.logprobs == 0


def test_completions_still_refuse_logprobs() -> None:
    error = _refused(validate_completion, {"prompt": "a", "logprobs": 2}, CONFIG, 10)
    assert error.param == "logprobs"


def test_completion_only_fields() -> None:
    assert _refused(validate_completion, {"prompt": "a", "echo": True}, CONFIG, 10).param == "echo"
    assert _refused(validate_chat, {"messages": MESSAGES, "echo": False}, CONFIG).code == (
        "unknown_field"
    )


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"{not json", "not valid JSON at character 1"),
        (b"[1]", "must be a JSON object"),
        (b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
        (b"\xff", "not valid JSON"),
    ],
)
def test_parse_body(raw: bytes, match: str) -> None:
    error = _refused(parse_body, raw)
    assert error.code == "invalid_json"
    assert match in error.message


def test_parse_body_and_model() -> None:
    assert parse_body(b'{"a": 1}') == {"a": 1}
    check_model({"model": "tiny"}, "tiny")
    check_model({}, "tiny")
    error = _refused(check_model, {"model": "gpt-9"}, "tiny")
    assert (error.status, error.code, error.param) == (404, "model_not_found", "model")
