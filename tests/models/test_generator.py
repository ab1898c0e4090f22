"""Generator: a model bound to one output type, for sync and async models."""

from __future__ import annotations

import warnings
from typing import Any, Literal

import httpx2
import pytest

import outlines_like.models as m
from outlines_like.errors import TruncatedOutputWarning, UnsupportedConstraintError
from outlines_like.types import JsonSchema, Regex
from tests.conftest import FakeServer, chat_body, chunk, sse


def stream_of(text: str) -> httpx2.Response:
    """The text one character a chunk, the last with ``finish_reason: stop`` as servers send."""
    return sse(*(chunk(ch) for ch in text[:-1]), chunk(text[-1], finish="stop"))


def sglang(fake: FakeServer) -> m.Model:
    return m.from_sglang(fake.client(), "tiny")


def asglang(fake: FakeServer) -> m.AsyncModel:
    return m.from_sglang(fake.aclient(), "tiny")


Colour = Literal["red", "green"]


def test_sync_generator_methods() -> None:
    server = FakeServer(
        chat_body("red"),
        chat_body("green"),
        chat_body("red"),
        stream_of("green"),
        chat_body("green"),
        chat_body("red"),
    )
    gen = m.Generator(sglang(server), Colour)
    assert isinstance(gen, m.ModelGenerator)
    assert gen("Colour?") == "red"
    assert gen.parse("Colour?") == "green"
    result = gen.complete("Colour?")
    assert isinstance(result, m.Completion)
    assert result.text == "red"
    assert "".join(gen.stream("Colour?")) == "green"
    assert gen.batch(["a", "b"], max_concurrency=1) == ["green", "red"]
    assert all(body["regex"] == "red|green" for body in server.bodies)
    assert len(server.bodies) == 6


async def test_async_generator_methods() -> None:
    server = FakeServer(
        chat_body("7"),
        chat_body("8"),
        chat_body("9"),
        stream_of("12"),
        chat_body("1"),
        chat_body("2"),
    )
    gen = m.Generator(asglang(server), int)
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
        m.Generator(sglang(FakeServer()), object())
    with pytest.raises(ValueError, match=r"regex|pattern|Regex"):
        m.Generator(sglang(FakeServer()), Regex("(unclosed"))


def test_term_is_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import outlines_like.models._call as core
    from outlines_like.types import Term, to_term

    built: list[object] = []

    def counting(output_type: object) -> Term | None:
        built.append(output_type)
        return to_term(output_type)

    monkeypatch.setattr(core, "to_term", counting)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    server = FakeServer(chat_body('{"a": 1}'), chat_body('{"a": 2}'), chat_body('{"a": 3}'))
    gen = m.Generator(sglang(server), JsonSchema(schema))
    assert len(built) == 1  # compiled here, at construction
    assert gen.parse("x") == {"a": 1}
    assert gen.parse("x") == {"a": 2}
    gen.complete("x")
    assert len(built) == 1  # and never again: the model's methods got the constraint
    assert server.bodies[0]["response_format"] == server.bodies[1]["response_format"]


def test_warnings_point_at_the_callers_line() -> None:
    cut = chat_body("12", finish="length")
    gen = m.Generator(sglang(FakeServer(cut)), int)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        gen("x")
    assert [w.category for w in record] == [TruncatedOutputWarning]
    assert record[0].filename == __file__


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

    from tests.models.test_remote import _hero_stream

    class Adventurer(pydantic.BaseModel):
        name: str
        level: int

    fake = FakeServer(_hero_stream())
    gen = m.Generator(m.from_vllm(fake.client(), "tiny"), Adventurer)
    assert list(gen.stream_parse("x"))[-1] == Adventurer(name="Ada", level=12)
