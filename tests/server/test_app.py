"""The reference server over real HTTP: dialects, streaming shapes, n, seed, stop, errors."""

from __future__ import annotations

import concurrent.futures
import json
import re
from typing import Any

import httpx
import jsonschema
import pytest

pytestmark = [pytest.mark.server, pytest.mark.torch]

MESSAGES = [{"role": "user", "content": "Give me the answer."}]
SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 9},
        "ok": {"type": "boolean"},
    },
    "required": ["color", "n", "ok"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "x", "schema": SCHEMA, "strict": True},
}


def _check_schema(text: str) -> None:
    jsonschema.validate(json.loads(text), SCHEMA)


def _regex(pattern: str) -> Any:
    return lambda text: re.fullmatch(pattern, text) or pytest.fail(f"{text!r} !~ {pattern}")


@pytest.mark.parametrize(
    ("kwargs", "check"),
    [
        ({"extra_body": {"regex": "[a-z]{3}-[0-9]{2}"}}, _regex("[a-z]{3}-[0-9]{2}")),
        ({"extra_body": {"structured_outputs": {"regex": "[0-9]{4}"}}}, _regex("[0-9]{4}")),
        (
            {"extra_body": {"structured_outputs": {"choice": ["yes", "no", "maybe"]}}},
            _regex("yes|no|maybe"),
        ),
        ({"extra_body": {"guided_choice": ["left", "right"]}}, _regex("left|right")),
        ({"extra_body": {"guided_regex": "(true|false)"}}, _regex("true|false")),
        ({"extra_body": {"structured_outputs": {"json": SCHEMA}}}, _check_schema),
        ({"extra_body": {"guided_json": SCHEMA}}, _check_schema),
        ({"extra_body": {"json_schema": json.dumps(SCHEMA)}}, _check_schema),
        ({"extra_body": {"json_schema": SCHEMA}}, _check_schema),
        ({"response_format": RESPONSE_FORMAT}, _check_schema),
        ({"response_format": {"type": "json_object", "schema": SCHEMA}}, _check_schema),
        (
            {"extra_body": {"grammar": 'root ::= "answer: " ("yes" | "no") "."'}},
            _regex("answer: (yes|no)\\."),
        ),
        ({"extra_body": {"ebnf": 'root ::= "x" [0-9] [0-9]?'}}, _regex("x[0-9]{1,2}")),
        (
            {
                "extra_body": {
                    "structured_outputs": {"grammar": 'start: "answer: " ("yes" | "no") "."'}
                }
            },
            _regex("answer: (yes|no)\\."),
        ),
    ],
)
def test_each_dialect_is_enforced_on_chat(client: Any, kwargs: dict[str, Any], check: Any) -> None:
    r = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=60, temperature=0.8, seed=3, **kwargs
    )
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    check(choice.message.content)


@pytest.mark.parametrize(
    ("extra", "check"),
    [
        ({"regex": "[a-z]{2}[0-9]"}, _regex("[a-z]{2}[0-9]")),
        ({"json_schema": SCHEMA}, _check_schema),
        ({"grammar": 'root ::= "n=" [0-9]'}, _regex("n=[0-9]")),
    ],
)
def test_constraints_on_completions(client: Any, extra: dict[str, Any], check: Any) -> None:
    r = client.completions.create(
        model="tiny", prompt="The answer is", max_tokens=60, temperature=0.8, extra_body=extra
    )
    assert r.choices[0].finish_reason == "stop"
    check(r.choices[0].text)


def test_unconstrained_chat_shape_and_usage(client: Any) -> None:
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=5, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_streaming_chunks_and_usage(server: Any, client: Any) -> None:
    stream = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        max_tokens=40,
        temperature=0.5,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"regex": "[a-z]{5,8}"},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert re.fullmatch("[a-z]{5,8}", text)
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finals] == ["stop"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens >= 2
    assert all(c.usage is None for c in chunks[:-1])
    # the raw wire: SSE lines ending with [DONE]
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 3, "stream": True}
    raw = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=30).text
    assert raw.rstrip().endswith("data: [DONE]")


def test_streaming_completions(client: Any) -> None:
    chunks = list(
        client.completions.create(
            model="tiny", prompt="x", max_tokens=4, stream=True, temperature=0
        )
    )
    assert chunks
    assert all(c.object == "text_completion" for c in chunks)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_n_choices_all_constrained(client: Any) -> None:
    r = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        n=3,
        max_tokens=20,
        temperature=1.0,
        seed=5,
        extra_body={"regex": "[0-9]{3}"},
    )
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert all(re.fullmatch("[0-9]{3}", c.message.content) for c in r.choices)


def test_n_streams_every_index(client: Any) -> None:
    chunks = list(
        client.chat.completions.create(
            model="tiny", messages=MESSAGES, n=2, max_tokens=4, stream=True, temperature=1.0
        )
    )
    finished = sorted(
        c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason
    )
    assert finished == [0, 1]


def test_seed_makes_sampling_reproducible(client: Any) -> None:
    def once() -> str:
        r = client.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=12, temperature=1.0, seed=42
        )
        return str(r.choices[0].message.content)

    assert once() == once()


def test_stop_strings(client: Any) -> None:
    r = client.completions.create(
        model="tiny",
        prompt="p",
        max_tokens=30,
        temperature=0,
        stop=["-c"],
        extra_body={"regex": "a-b-c-d"},
    )
    assert r.choices[0].text == "a-b"
    assert r.choices[0].finish_reason == "stop"


def test_reasoning_and_tool_calls_are_split(client: Any) -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "paris"}}\n</tool_call>'
    pattern = re.escape("<think>") + "[a-z]{3,6}" + re.escape("</think>") + re.escape(call)
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    r = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        max_tokens=200,
        temperature=0.5,
        tools=tools,
        extra_body={"regex": pattern},
    )
    message = r.choices[0].message
    assert re.fullmatch("[a-z]{3,6}", message.model_extra["reasoning_content"])
    assert r.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls[0].function.name == "get_weather"
    assert json.loads(message.tool_calls[0].function.arguments) == {"city": "paris"}
    assert not message.content
    # streamed: the same call, arguments aggregated from deltas
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            max_tokens=200,
            temperature=0.5,
            tools=tools,
            stream=True,
            extra_body={"regex": pattern},
        )
    )
    args = "".join(
        tc.function.arguments or ""
        for c in chunks
        if c.choices
        for tc in (c.choices[0].delta.tool_calls or [])
    )
    assert json.loads(args) == {"city": "paris"}
    reasoning = "".join(
        c.choices[0].delta.model_extra.get("reasoning_content") or "" for c in chunks if c.choices
    )
    assert re.fullmatch("[a-z]{3,6}", reasoning)
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


BAD = [
    (b"{not json", 400, "invalid_json"),
    (b"[1, 2]", 400, "invalid_json"),
    (b"[" * 50_000 + b"]" * 50_000, 400, "invalid_json"),
    (json.dumps({"messages": MESSAGES, "regex": "[a-"}).encode(), 400, "invalid_constraint"),
    (
        json.dumps(
            {"messages": MESSAGES, "json_schema": {"type": "object", "properties": 3}}
        ).encode(),
        400,
        None,
    ),
    (json.dumps({"messages": MESSAGES, "grammar": "root ::= ("}).encode(), 400, None),
    (json.dumps({"messages": MESSAGES, "bogus": 1}).encode(), 400, "unknown_field"),
    (json.dumps({"messages": MESSAGES, "max_tokens": 100000}).encode(), 400, None),
    (json.dumps({"messages": MESSAGES, "max_tokens": 10**9}).encode(), 400, None),
    (json.dumps({"messages": MESSAGES, "temperature": "hot"}).encode(), 400, None),
    (json.dumps({"messages": MESSAGES, "n": 0}).encode(), 400, None),
    (json.dumps({"messages": MESSAGES, "stop": [1]}).encode(), 400, None),
    (json.dumps({"messages": [{"role": "robot", "content": "x"}]}).encode(), 400, None),
    (json.dumps({"messages": []}).encode(), 400, None),
    (json.dumps({"messages": MESSAGES, "model": "gpt-9"}).encode(), 404, "model_not_found"),
    (json.dumps({"messages": MESSAGES, "logprobs": 1}).encode(), 400, None),
    (json.dumps({"messages": MESSAGES, "top_logprobs": 2}).encode(), 400, None),
    (
        json.dumps({"messages": MESSAGES, "regex": "a", "guided_regex": "b"}).encode(),
        400,
        "conflict",
    ),
    (
        json.dumps({"messages": MESSAGES, "regex": "(a|b)*c" * 4000}).encode(),
        400,
        "constraint_too_large",
    ),
    (json.dumps({"messages": MESSAGES, "x": "y" * 300_000}).encode(), 413, "body_too_large"),
]


@pytest.mark.parametrize(("body", "status", "code"), BAD)
def test_bad_requests_get_openai_errors_and_the_server_stays_up(
    server: Any, body: bytes, status: int, code: str | None
) -> None:
    url = server.base_url + "/v1/chat/completions"
    r = httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if code is not None:
        assert error["code"] == code
    ok = httpx.post(url, json={"messages": MESSAGES, "max_tokens": 1}, timeout=30)
    assert ok.status_code == 200


def test_a_huge_dfa_is_refused_quickly(server: Any) -> None:
    # (a|b)*a(a|b){N}: the DFA needs 2**N states; the state limit refuses it fast.
    body = {"messages": MESSAGES, "regex": "(a|b)*a(a|b){24}", "max_tokens": 5}
    r = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400
    assert r.elapsed.total_seconds() < 10  # compile_timeout is 5 s in these tests


def test_a_hundred_concurrent_clients_are_all_answered(server: Any) -> None:
    url = server.base_url + "/v1/chat/completions"

    def one(i: int) -> httpx.Response:
        body = {"messages": MESSAGES, "max_tokens": 4, "seed": i, "regex": "[a-z]{1,4}"}
        return httpx.post(url, json=body, timeout=120)

    with concurrent.futures.ThreadPoolExecutor(100) as pool:
        answers = list(pool.map(one, range(100)))
    for r in answers:
        # a full queue may say so (429/503 with an OpenAI error body); nothing else is allowed
        assert r.status_code in (200, 429, 503), r.text
        if r.status_code == 200:
            assert re.fullmatch("[a-z]{1,4}", r.json()["choices"][0]["message"]["content"])
        else:
            assert r.json()["error"]["message"]
    assert sum(r.status_code == 200 for r in answers) >= 1
    ok = httpx.post(url, json={"messages": MESSAGES, "max_tokens": 1}, timeout=30)
    assert ok.status_code == 200


def test_unknown_route_is_an_openai_404(server: Any) -> None:
    r = httpx.get(server.base_url + "/v1/nothing")
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "not_found_error"


def test_models_health_version(server: Any, client: Any) -> None:
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert httpx.get(server.base_url + "/health").json() == {"status": "ok"}
    assert httpx.get(server.base_url + "/version").json()["server"] == "outlines-like"


def test_concurrent_clients_share_forward_passes(server: Any, client: Any) -> None:
    before = httpx.get(server.base_url + "/stats").json()["batch_sizes"]

    def one(i: int) -> str:
        r = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": f"q{i}"}],
            max_tokens=8,
            temperature=1.0,
            seed=i,
            extra_body={"regex": "[0-9]{2,6}"},
        )
        return str(r.choices[0].message.content)

    with concurrent.futures.ThreadPoolExecutor(30) as pool:
        texts = list(pool.map(one, range(30)))
    assert all(re.fullmatch("[0-9]{2,6}", t) for t in texts)
    after = httpx.get(server.base_url + "/stats").json()["batch_sizes"]
    grown = {int(k): v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}
    assert max(grown) >= 5, grown  # several requests rode in one forward pass


def test_api_key(service: Any) -> None:
    import dataclasses

    import openai

    from outlines_like.server.run import ServerThread
    from outlines_like.server.service import GenerationService

    keyed = GenerationService.__new__(GenerationService)
    keyed.__dict__.update(service.__dict__)
    keyed.config = dataclasses.replace(service.config, api_key="sekret")
    with ServerThread(service=keyed) as srv:
        url = srv.base_url + "/v1/models"
        assert httpx.get(url).status_code == 401
        assert (
            httpx.get(url, headers={"Authorization": "Bearer wrong"}).json()["error"]["code"]
            == "invalid_api_key"
        )
        good = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="sekret", max_retries=0)
        assert good.models.list().data[0].id == "tiny"
        assert httpx.get(srv.base_url + "/health").status_code == 200


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["paris", "tokyo"]}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}


@pytest.mark.parametrize(
    ("tool_choice", "names"),
    [
        ("required", {"get_weather", "get_time"}),
        ({"type": "function", "function": {"name": "get_weather"}}, {"get_weather"}),
    ],
)
def test_tool_choice_forces_a_valid_call(client: Any, tool_choice: Any, names: set[str]) -> None:
    r = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        max_tokens=120,
        temperature=0.9,
        seed=2,
        tools=[WEATHER, TIME],
        tool_choice=tool_choice,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name in names
    args = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        assert args["city"] in ("paris", "tokyo")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tool_choice": "required"}, "tool_choice"),  # no tools
        ({"tools": [WEATHER], "tool_choice": {"function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": "required", "regex": "a"}, "tool_choice"),
        ({"tools": [{"type": "function"}]}, "tools[0]"),
    ],
)
def test_bad_tool_requests(server: Any, extra: dict[str, Any], param: str) -> None:
    r = httpx.post(
        server.base_url + "/v1/chat/completions", json={"messages": MESSAGES, **extra}, timeout=30
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_completions_with_several_prompts_and_token_ids(client: Any, service: Any) -> None:
    r = client.completions.create(
        model="tiny",
        prompt=["a", "b"],
        n=2,
        max_tokens=10,
        temperature=1.0,
        seed=1,
        extra_body={"regex": "[0-9]{2}"},
    )
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3]
    assert all(re.fullmatch("[0-9]{2}", c.text) for c in r.choices)
    ids = service.tokenizer.encode("hello")
    r = client.completions.create(model="tiny", prompt=ids, max_tokens=3, temperature=0)
    assert r.usage.prompt_tokens == len(ids)


def test_a_model_folder_is_served_under_its_name(tiny_path: Any) -> None:
    from outlines_like.server.config import ServerConfig
    from outlines_like.server.loading import load_service

    service = load_service(ServerConfig(model=str(tiny_path)))
    assert service.model_name == tiny_path.name
    assert service.pipeline.vocab_size == len(service.vocabulary)


def test_reasoning_mode_constrains_after_think(service: Any) -> None:
    import dataclasses

    import openai

    from outlines_like.server.run import ServerThread
    from outlines_like.server.service import GenerationService

    thinking = GenerationService.__new__(GenerationService)
    thinking.__dict__.update(service.__dict__)
    thinking.config = dataclasses.replace(service.config, reasoning=True)
    # A random model never writes </think>; its greedy first answer token stands in for it.
    prompt = service.tokenizer.apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=False
    )
    first = _greedy_first_token(service, prompt)
    thinking.think_end_token_id = first
    with ServerThread(service=thinking) as srv:
        client: Any = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="-", max_retries=0)
        r = client.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            max_tokens=30,
            temperature=0,
            extra_body={"regex": "[0-9]{3}"},
        )
        # the think-end token was free (the regex alone forbids it), then the regex held
        # the stand-in is not the text "</think>", so the whole output reads as reasoning
        head = service.tokenizer.decode([first]).strip()
        reasoning = r.choices[0].message.model_extra["reasoning_content"]
        assert re.fullmatch(re.escape(head) + "[0-9]{3}", reasoning), reasoning
        assert r.choices[0].message.content == ""
        # with the block pre-closed by the template, the constraint applies at once
        r = client.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            max_tokens=30,
            temperature=0,
            extra_body={"regex": "[0-9]{3}", "chat_template_kwargs": {"enable_thinking": False}},
        )
        assert re.fullmatch("[0-9]{3}", r.choices[0].message.content)


def _greedy_first_token(service: Any, prompt: str) -> int:
    import torch

    ids = service.tokenizer.encode(prompt, add_special_tokens=False)
    with torch.inference_mode():
        logits = service.pipeline.model(torch.tensor([ids])).logits[0, -1]
    return int(logits.argmax())


def test_a_malformed_tool_call_stays_in_the_content(client: Any) -> None:
    # (Streamed, tools.ToolCallParser warns and drops such a block: see the report.)
    bad = "<tool_call>\nnot json\n</tool_call>"
    r = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        max_tokens=80,
        temperature=0,
        tools=[WEATHER],
        extra_body={"regex": re.escape(bad)},
    )
    assert r.choices[0].message.content == bad
    assert r.choices[0].finish_reason == "stop"


def test_tool_choice_with_defs_refs(client: Any) -> None:
    # pydantic-style parameters: an Enum is a $ref into $defs, which must follow the parameters
    unit = {"enum": ["celsius", "fahrenheit"], "type": "string", "title": "Unit"}
    forecast = {
        "type": "function",
        "function": {
            "name": "forecast",
            "parameters": {
                "type": "object",
                "properties": {"unit": {"$ref": "#/$defs/Unit"}},
                "required": ["unit"],
                "$defs": {"Unit": unit},
            },
        },
    }
    other = {
        "type": "function",
        "function": {
            "name": "other",
            "parameters": {
                "type": "object",
                "properties": {"u": {"$ref": "#/definitions/Unit"}},
                "required": ["u"],
                "definitions": {"Unit": {"enum": ["x"]}},
            },
        },
    }
    r = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        max_tokens=80,
        temperature=0.9,
        seed=1,
        tools=[forecast, other],
        tool_choice="required",
    )
    call = r.choices[0].message.tool_calls[0]
    args = json.loads(call.function.arguments)
    assert (call.function.name, args) in (
        ("forecast", {"unit": "celsius"}),
        ("forecast", {"unit": "fahrenheit"}),
        ("other", {"u": "x"}),
    )
