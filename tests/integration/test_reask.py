"""Reask against the reference server: a validator no mask can express rejects the first answers.

The tiny model's words are noise, so the validator counts its calls instead of reading the
name: it rejects the first ``k`` answers, whatever they say. The structure is the server's
job (the constraint holds on every attempt); asking again is ours.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

import openai
import pydantic
import pytest

import outlines_like as ol
from outlines_like.errors import ParseError
from outlines_like.messages import Completion, Usage
from tests.integration.conftest import Recorder, recorded_model

if TYPE_CHECKING:
    from tests.integration.conftest import Server

pytestmark = [pytest.mark.realservers, pytest.mark.timeout(600)]

KW = {"max_tokens": 80, "seed": 7}


def rejecting(first: int) -> type[pydantic.BaseModel]:
    """A pet whose validator rejects its first ``first`` values."""
    calls = itertools.count()

    class Pet(pydantic.BaseModel):
        kind: Literal["cat", "dog", "fish"]
        age: int = pydantic.Field(ge=0, le=9)

        @pydantic.model_validator(mode="after")
        def not_yet(self) -> Pet:
            if next(calls) < first:
                raise ValueError("the judge rejects this pet")
            return self

    return Pet


@pytest.fixture
def bodies() -> Recorder:
    return Recorder("/completions")  # the completion requests only


@pytest.fixture
def model(reference_server: Server, bodies: Recorder) -> Iterator[ol.Model]:
    with recorded_model(reference_server.base_url, bodies) as m:
        yield m


def _total(usages: list[Usage | None]) -> Usage:
    total = Usage()
    for usage in usages:
        assert usage is not None
        total = total + usage
    return total


def test_reask_succeeds_within_the_budget(model: ol.Model, bodies: Recorder) -> None:
    pet = model.parse("Describe a pet.", rejecting(2), retries=2, **KW)
    assert pet.kind in ("cat", "dog", "fish")
    assert [len(body["messages"]) for body in bodies.bodies] == [1, 3, 5]  # type: ignore[arg-type]
    constraints = {json.dumps(body["structured_outputs"], sort_keys=True) for body in bodies.bodies}
    assert len(constraints) == 1  # the same constraint on every attempt
    follow_up = bodies.bodies[1]["messages"][2]  # type: ignore[index]
    assert follow_up["role"] == "user"
    assert "the judge rejects this pet" in follow_up["content"]

    before = model.usage
    completion = model.complete("Describe a pet.", rejecting(1), retries=3, **KW)
    assert isinstance(completion, Completion)
    attempts = completion.attempts
    assert len(attempts) == 2
    assert isinstance(attempts[0].error, ParseError)
    assert attempts[-1].error is None
    assert attempts[-1].text == completion.text
    assert attempts[0].text == bodies.bodies[-1]["messages"][1]["content"]  # type: ignore[index]
    used = _total([a.usage for a in attempts])
    assert model.usage == before + used  # every attempt counted, nothing else
    first, second = (a.usage for a in attempts)
    assert first is not None
    assert second is not None
    assert second.prompt_tokens > first.prompt_tokens + first.completion_tokens


def test_reask_exhausts_the_budget_and_keeps_every_attempt(
    model: ol.Model, bodies: Recorder
) -> None:
    with pytest.raises(ParseError, match="the judge rejects this pet") as caught:
        model.parse("Describe a pet.", rejecting(10), retries=2, **KW)
    error = caught.value
    assert len(error.attempts) == 3
    assert len(bodies.bodies) == 3
    assert [a.text for a in error.attempts[:-1]] == [
        m["content"]
        for m in bodies.bodies[-1]["messages"][1::2]  # type: ignore[index]
    ]
    assert all(isinstance(a.error, ParseError) for a in error.attempts)
    assert error.attempts[-1].error is error
    assert model.usage == _total([a.usage for a in error.attempts])


async def test_async_stream_parse_reasks(reference_server: Server) -> None:
    client = openai.AsyncOpenAI(base_url=reference_server.base_url, api_key="-")
    amodel = ol.from_server(client)
    Pet = rejecting(1)
    try:
        values = [v async for v in amodel.stream_parse("Describe a pet.", Pet, retries=1, **KW)]
    finally:
        await client.close()
    assert isinstance(values[-1], Pet)
    assert values[-1].kind in ("cat", "dog", "fish")
