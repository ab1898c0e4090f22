"""The same matrix of output types and methods on every real server: no out-of-shape success.

Each call either returns an answer that fits its type (checked here independently, with
``jsonschema``/``re``/Lark through ``types.verify``, and by the library itself before it
returns), or raises an error of the library's tree (a constraint the server cannot take,
a violation the local check caught, output cut at ``max_tokens``). Nothing else passes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Literal, Optional, Union

import openai
import pydantic
import pytest
from typing_extensions import TypedDict

import outlines_like as ol
from outlines_like.errors import (
    BadRequestError,
    ConstraintViolationError,
    GenerationError,
    OutlinesLikeError,
    TruncatedOutputWarning,
    UnsupportedConstraintError,
)
from outlines_like.types import CFG, JsonSchema, Regex, email, ipv4, to_term
from outlines_like.types.verify import violation

if TYPE_CHECKING:
    from tests.integration.conftest import Server

pytestmark = [pytest.mark.realservers, pytest.mark.timeout(1800)]

Short = Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z]{1,8}$")]


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Score(pydantic.BaseModel):
    score: float = pydantic.Field(ge=0, le=1)


class Stats(pydantic.BaseModel):
    strength: int = pydantic.Field(ge=1, le=20)
    agility: int = pydantic.Field(ge=1, le=20)


class Character(pydantic.BaseModel):
    name: Short
    role: Literal["wizard", "knight"]
    stats: Stats


class Tree(pydantic.BaseModel):
    v: int = pydantic.Field(ge=0, le=9)
    kids: list[Tree] = pydantic.Field(max_length=2)


class Cat(pydantic.BaseModel):
    kind: Literal["cat"]
    lives: int = pydantic.Field(ge=1, le=9)


class Dog(pydantic.BaseModel):
    kind: Literal["dog"]
    good: bool


class Pet(pydantic.BaseModel):
    pet: Annotated[Union[Cat, Dog], pydantic.Field(discriminator="kind")]


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Span(TypedDict):
    start: int
    end: int


OUTPUT_TYPES: dict[str, object] = {
    "int": int,
    "float": float,
    "bool": bool,
    "literal": Literal["red", "green", "blue"],
    "literal-ints": Literal[1, 2, 3],
    "enum": Color,
    "date": dt.date,
    "time": dt.time,
    "datetime": dt.datetime,
    "uuid": uuid.UUID,
    "email": email,
    "ipv4": ipv4,
    "optional-int": Optional[int],
    "union": Union[Literal["none"], int],
    "list-int": Annotated[list[int], pydantic.Field(max_length=3)],
    "tuple": tuple[int, bool],
    "model": Score,
    "nested-model": Character,
    "recursive-model": Tree,
    "discriminated-union": Pet,
    "constrained-string": Short,
    "dataclass": Point,
    "typeddict": Span,
    "schema-multipleof": JsonSchema({"type": "integer", "multipleOf": 5}),
    "schema-multipleof-lenient": JsonSchema({"type": "integer", "multipleOf": 5}, lenient=True),
    "schema-minproperties": JsonSchema(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
            "minProperties": 1,
            "additionalProperties": False,
        },
        lenient=True,
    ),
    "schema-format-date": JsonSchema({"type": "string", "format": "date"}),
    "schema-bounded-number": JsonSchema({"type": "number", "minimum": -1, "maximum": 1}),
    "regex": Regex(r"[A-Z]{3}-[0-9]{4}"),
    "lark": CFG('start: "answer: " ("yes" | "no") "."'),
    "gbnf": CFG('root ::= "n=" [0-9] [0-9]?'),
}


@dataclasses.dataclass
class Tally:
    """What each server did with the matrix."""

    valid: int = 0
    refused: int = 0  # UnsupportedConstraintError before sending, or the server's 400
    caught: int = 0  # ConstraintViolationError: the server broke the constraint, we noticed
    cut: int = 0  # GenerationError: max_tokens
    other: list[str] = dataclasses.field(default_factory=list)


TALLIES: dict[str, Tally] = {}


@pytest.fixture
def model(server: Server) -> Iterator[ol.Model]:
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", timeout=120)
    yield ol.from_server(client)
    client.close()


def _outcome(server: Server, name: str, call: object) -> None:
    """Run ``call``; a returned text must fit, anything raised must be ours."""
    tally = TALLIES.setdefault(server.name, Tally())
    term = to_term(OUTPUT_TYPES[name])
    try:
        with warnings.catch_warnings():
            # A cut answer that still fits warns (TruncatedOutputWarning) and counts as valid.
            warnings.simplefilter("ignore", TruncatedOutputWarning)
            texts = call() if callable(call) else call
    except (UnsupportedConstraintError, BadRequestError):
        tally.refused += 1  # refused before sending, or by the server (400): never an answer
        return
    except ConstraintViolationError:
        tally.caught += 1
        return
    except GenerationError:
        tally.cut += 1
        return
    except OutlinesLikeError as exc:
        tally.other.append(f"{name}: {type(exc).__name__}: {exc}")
        return
    for text in texts if isinstance(texts, list) else [texts]:
        assert isinstance(text, str)
        assert violation(term, text) is None, f"{server.name} returned {text!r} for {name}"
    tally.valid += 1


@pytest.mark.parametrize("name", list(OUTPUT_TYPES))
def test_call_and_parse(model: ol.Model, server: Server, name: str) -> None:
    output_type = OUTPUT_TYPES[name]
    kw = {"max_tokens": server.json_max_tokens, "seed": 7, "temperature": 0}
    _outcome(server, name, lambda: model("Answer:", output_type, **kw))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TruncatedOutputWarning)
            value = model.parse("Answer:", output_type, **kw)
    except OutlinesLikeError:
        return  # counted above where it matters; parse raises the same kinds
    assert value is not None or output_type is Optional[int]


STREAMED = ["int", "literal", "date", "model", "nested-model", "regex", "lark", "list-int"]


@pytest.mark.parametrize("name", STREAMED)
def test_stream_batch_and_stream_parse(model: ol.Model, server: Server, name: str) -> None:
    output_type = OUTPUT_TYPES[name]
    kw = {"max_tokens": server.json_max_tokens, "seed": 8, "temperature": 0}
    _outcome(server, name, lambda: "".join(model.stream("Answer:", output_type, **kw)))
    _outcome(server, name, lambda: model.batch(["A:", "B:", "C:"], output_type, **kw))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TruncatedOutputWarning)
            values = list(model.stream_parse("Answer:", output_type, **kw))
    except OutlinesLikeError:
        return
    assert values


@pytest.mark.parametrize("name", ["int", "model", "regex", "gbnf"])
async def test_async_methods(server: Server, name: str) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", timeout=120)
    amodel = ol.from_server(client)
    output_type = OUTPUT_TYPES[name]
    kw = {"max_tokens": server.json_max_tokens, "seed": 9, "temperature": 0}
    try:
        warnings.simplefilter("ignore", TruncatedOutputWarning)  # pytest restores filters
        _outcome(server, name, await _capture(amodel("Answer:", output_type, **kw)))
        _outcome(server, name, await _capture(amodel.batch(["A:", "B:"], output_type, **kw)))
        pieces = await _capture(_join(amodel.stream("Answer:", output_type, **kw)))
        _outcome(server, name, pieces)
    finally:
        await client.close()


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __call__(self) -> object:
        raise self.exc


async def _capture(awaitable: object) -> object:
    """The awaited value, or a callable that re-raises what it raised (for ``_outcome``)."""
    try:
        return await awaitable  # type: ignore[misc]
    except OutlinesLikeError as exc:
        return _Raised(exc)


async def _join(stream: object) -> str:
    return "".join([p async for p in stream])  # type: ignore[attr-defined]


def test_the_matrix_was_mostly_answered(server: Server) -> None:
    """Run last: most of the matrix must give valid answers, and nothing unexpected."""
    tally = TALLIES.get(server.name)
    if tally is None:
        pytest.skip("the matrix did not run for this server")
    total = tally.valid + tally.refused + tally.caught + tally.cut + len(tally.other)
    print(f"\n{server.name}: {tally}")
    assert not tally.other, tally.other
    assert tally.valid >= 0.6 * total, tally
