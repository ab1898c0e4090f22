"""The same user code against every real server: only the base URL differs.

Random-weight models never close a free string, so every free-text field is bounded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

import jsonschema
import openai
import pydantic
import pytest

import outlines_like as ol
from outlines_like.errors import BadRequestError
from outlines_like.types import CFG, JsonSchema, Regex
from tests.integration.conftest import Recorder, recorded_model

if TYPE_CHECKING:
    from tests.integration.conftest import Server

pytestmark = [pytest.mark.realservers, pytest.mark.timeout(1500)]

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
CODE = Regex(r"[a-z]{3}-[0-9]{2}")
ANSWER = CFG('start: "answer: " ("yes" | "no") "."')
ANSWER_EBNF = CFG('root ::= "answer: " yes-or-no "."\nyes-or-no ::= "yes" | "no"')


class Reading(pydantic.BaseModel):
    color: Literal["red", "green", "blue"]
    n: int = pydantic.Field(ge=0, le=9)
    ok: bool


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def model(server: Server, recorder: Recorder) -> Iterator[ol.Model]:
    with recorded_model(server.base_url, recorder, api_key="sk-test") as m:
        yield m


def test_detects_the_server(model: ol.Model, server: Server) -> None:
    # The reference server speaks vLLM's current dialect (structured_outputs).
    expected = {"reference": "vllm", "llamacpp": "llamacpp", "vllm": "vllm"}[server.name]
    assert model.server is None  # reading it never sends a request
    assert model.detect().kind == expected
    assert model.server == expected


def test_int(model: ol.Model) -> None:
    value = model.parse("Pick a number:", int, max_tokens=12, seed=1)
    assert isinstance(value, int)


def test_literal(model: ol.Model) -> None:
    value = model.parse("Color?", Literal["red", "green", "blue"], max_tokens=8, seed=2)
    assert value in ("red", "green", "blue")


def test_regex(model: ol.Model) -> None:
    text = model("Code:", CODE, max_tokens=16, seed=3)
    assert re.fullmatch(CODE.pattern, text), text


def test_pydantic_model(model: ol.Model, server: Server) -> None:
    value = model.parse("Reading:", Reading, max_tokens=server.json_max_tokens, seed=4)
    assert isinstance(value, Reading)


def test_json_schema_dict(model: ol.Model, server: Server) -> None:
    value = model.parse("Reading:", JsonSchema(SCHEMA), max_tokens=server.json_max_tokens, seed=5)
    jsonschema.validate(value, SCHEMA)


def test_lark_grammar(model: ol.Model) -> None:
    text = model("Answer:", ANSWER, max_tokens=12, seed=6)
    assert text in ("answer: yes.", "answer: no."), text


def test_ebnf_grammar(model: ol.Model) -> None:
    text = model("Answer:", ANSWER_EBNF, max_tokens=12, seed=6)
    assert text in ("answer: yes.", "answer: no."), text


def test_stream(model: ol.Model) -> None:
    pieces = list(model.stream("Code:", CODE, max_tokens=16, seed=7))
    assert len(pieces) >= 1
    assert re.fullmatch(CODE.pattern, "".join(pieces)), pieces


def test_n(model: ol.Model, server: Server) -> None:
    if not server.supports_n:
        pytest.skip(f"{server.name} serves one choice per request (no `n`)")
    texts = model("Code:", CODE, n=3, max_tokens=16, seed=8, temperature=1.0)
    assert isinstance(texts, list)
    assert len(texts) == 3
    for text in texts:
        assert re.fullmatch(CODE.pattern, text), text


def test_batch(model: ol.Model) -> None:
    texts = model.batch(["a", "b", "c"], CODE, max_tokens=16, seed=9)
    assert len(texts) == 3
    assert all(re.fullmatch(CODE.pattern, t) for t in texts), texts


def test_a_bad_request_is_a_bad_request_error(model: ol.Model) -> None:
    with pytest.raises(BadRequestError) as info:
        model("x", CODE, max_tokens="lots")
    assert info.value.status_code == 400
    assert not info.value.retryable


def test_never_sends_ignored_fields(model: ol.Model, recorder: Recorder, server: Server) -> None:
    model("Code:", CODE, max_tokens=16, seed=10)
    model("Color?", Literal["red", "green"], max_tokens=8, seed=10)
    model("Reading:", Reading, max_tokens=server.json_max_tokens, seed=10)
    model("Answer:", ANSWER, max_tokens=12, seed=10)
    sent = [b for b in recorder.bodies if "messages" in b or "prompt" in b]
    assert len(sent) == 4
    for body in sent:
        keys = set(body)
        if server.name == "vllm":  # vLLM 0.32 answers guided_* with 200 and no constraint
            assert not {k for k in keys if k.startswith("guided_")}, body
        if server.name == "llamacpp":  # ignored on /v1/completions, verbose on chat
            assert "guided_regex" not in keys


async def test_async(server: Server) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
    amodel = ol.from_server(client)
    value = await amodel.parse("Color?", Literal["red", "green", "blue"], max_tokens=8, seed=11)
    assert value in ("red", "green", "blue")
    pieces = [p async for p in amodel.stream("Code:", CODE, max_tokens=16, seed=12)]
    assert re.fullmatch(CODE.pattern, "".join(pieces))
    texts = await amodel.batch(["a", "b"], CODE, max_tokens=16, seed=13)
    assert all(re.fullmatch(CODE.pattern, t) for t in texts)
    await client.close()
