"""Generator: a model bound to one output type, for sync and async models."""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx2
import openai
import pytest

import outlines_like.models as m
from outlines_like.errors import UnsupportedConstraintError
from outlines_like.types import JsonSchema, Regex


def answer(*texts: str) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "tiny",
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
            for i, t in enumerate(texts)
        ],
    }


class Server:
    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        if body.get("stream"):
            text = self.texts.pop(0)
            chunks = [
                {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "t",
                    "choices": [{"index": 0, "delta": {"content": ch}, "finish_reason": end}],
                }
                for ch, end in zip(text, [None] * (len(text) - 1) + ["stop"], strict=True)
            ]
            sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, text=sse)
        return httpx2.Response(200, json=answer(self.texts.pop(0)))

    def model(self) -> m.Model:
        http = httpx2.Client(transport=httpx2.MockTransport(self))
        return m.from_sglang(
            openai.OpenAI(base_url="http://t/v1", api_key="x", http_client=http), "tiny"
        )

    def amodel(self) -> m.AsyncModel:
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(self))
        client = openai.AsyncOpenAI(base_url="http://t/v1", api_key="x", http_client=http)
        return m.from_sglang(client, "tiny")


Colour = Literal["red", "green"]


def test_sync_generator_methods() -> None:
    server = Server("red", "green", "red", "gr", "green", "red")
    gen = m.Generator(server.model(), Colour)
    assert isinstance(gen, m.ModelGenerator)
    assert gen("Colour?") == "red"
    assert gen.parse("Colour?") == "green"
    result = gen.complete("Colour?")
    assert isinstance(result, m.Completion)
    assert result.text == "red"
    assert "".join(gen.stream("Colour?")) == "gr"
    assert gen.batch(["a", "b"], max_concurrency=1) == ["green", "red"]
    assert all(body["regex"] == "red|green" for body in server.bodies)
    assert len(server.bodies) == 6


async def test_async_generator_methods() -> None:
    server = Server("7", "8", "9", "12", "1", "2")
    gen = m.Generator(server.amodel(), int)
    assert isinstance(gen, m.AsyncModelGenerator)
    assert await gen("n?") == "7"
    assert await gen.parse("n?") == 8
    result = await gen.complete("n?")
    assert isinstance(result, m.Completion)
    assert result.text == "9"
    assert [d async for d in gen.stream("n?")] == ["1", "2"]
    assert await gen.batch(["a", "b"], max_concurrency=1) == ["1", "2"]
    assert all("regex" in body for body in server.bodies)


def test_bad_type_fails_at_construction() -> None:
    with pytest.raises(UnsupportedConstraintError):
        m.Generator(Server().model(), object())
    with pytest.raises(ValueError, match=r"regex|pattern|Regex"):
        m.Generator(Server().model(), Regex("(unclosed"))


def test_term_is_built_once() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    server = Server('{"a": 1}', '{"a": 2}')
    gen = m.Generator(server.model(), JsonSchema(schema))
    assert gen._constraint.term is not None
    term = gen._constraint.term
    assert gen.parse("x") == {"a": 1}
    assert gen.parse("x") == {"a": 2}
    assert gen._constraint.term is term
    assert server.bodies[0]["response_format"] == server.bodies[1]["response_format"]


class LocalLike:
    """A model that is not ours: the generator calls its public methods."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object, object]] = []

    def __call__(self, prompt: str, output_type: object = None, **kw: Any) -> str:
        self.seen.append(("call", prompt, output_type))
        return "1"

    def parse(self, prompt: str, output_type: object, **kw: Any) -> int:
        self.seen.append(("parse", prompt, output_type))
        return 1

    def batch(self, prompts: list[str], output_type: object = None, **kw: Any) -> list[str]:
        self.seen.append(("batch", prompts[0], (output_type, kw)))
        return ["1"] * len(prompts)


def test_other_models_are_called_through_their_methods() -> None:
    local = LocalLike()
    gen = m.Generator(local, int)
    assert gen("p") == "1"
    assert gen.parse("p") == 1
    assert gen.batch(["p"]) == ["1"]
    assert gen.batch(["p"], return_exceptions=True, max_concurrency=2) == ["1"]
    assert local.seen == [
        ("call", "p", int),
        ("parse", "p", int),
        ("batch", "p", (int, {})),
        ("batch", "p", (int, {"max_concurrency": 2, "return_exceptions": True})),
    ]
    assert repr(gen).startswith("ModelGenerator(")


def test_generator_stream_parse() -> None:
    import pydantic

    from tests.models.test_remote import FakeServer, _hero_stream

    class Adventurer(pydantic.BaseModel):
        name: str
        level: int

    fake = FakeServer(_hero_stream())
    gen = m.Generator(m.from_vllm(fake.client(), "tiny"), Adventurer)
    assert list(gen.stream_parse("x"))[-1] == Adventurer(name="Ada", level=12)
