"""Every answer is checked against its output type: nothing out of shape comes back unnoticed.

The fake servers answer what llama.cpp answered in a real trial when it dropped keywords
(``660`` for a 0..1 float, ``6`` for a multiple of 5, ``{}`` under ``minProperties``).
"""

from __future__ import annotations

import warnings
from typing import Any

import pydantic
import pytest

import outlines_like.models as m
from outlines_like.errors import (
    ConstraintViolationError,
    ConstraintViolationWarning,
    GenerationError,
    ParseError,
)
from outlines_like.models._batch import CANCELLED
from outlines_like.types import JsonSchema, Regex
from tests.conftest import FakeServer, chat_body, chunk, sse


class Score(pydantic.BaseModel):
    score: float = pydantic.Field(ge=0, le=1)


def vllm(fake: FakeServer, **options: Any) -> m.Model:
    return m.from_vllm(fake.client(), "tiny", **options)


def test_an_answer_out_of_shape_raises_with_what_was_sent() -> None:
    fake = FakeServer(chat_body('{"score": 660}'))
    with pytest.raises(ConstraintViolationError) as info:
        vllm(fake)("Score?", Score)
    err = info.value
    assert err.text == '{"score": 660}'
    assert err.reason == "at /score: 660 is greater than the maximum of 1"
    assert err.server == "vllm"
    assert "structured_outputs" in err.fields
    assert isinstance(err, ParseError)  # code catching parse failures catches it too


@pytest.mark.parametrize(
    ("output_type", "answer"),
    [
        (JsonSchema({"type": "integer", "multipleOf": 5}, lenient=True), "6"),
        (JsonSchema({"type": "object", "minProperties": 1}, lenient=True), "{}"),
        (Regex(r"[a-z]{3}"), "abcd"),
        (int, "4.5"),
    ],
)
def test_every_method_checks(output_type: object, answer: str) -> None:
    stream = [chunk(answer[:1]), chunk(answer[1:], finish="stop")]
    fake = FakeServer(chat_body(answer), chat_body(answer), chat_body(answer), sse(*stream))
    model = m.from_llamacpp(fake.client(), "tiny")
    for call in (
        lambda: model("x", output_type),
        lambda: model.parse("x", output_type),
        lambda: model.complete("x", output_type),
        lambda: "".join(model.stream("x", output_type)),
    ):
        with pytest.raises(ConstraintViolationError):
            call()


def test_verify_warn_returns_the_answer_and_points_at_the_caller() -> None:
    fake = FakeServer(chat_body('{"score": 2}'))
    with pytest.warns(ConstraintViolationWarning, match="greater than the maximum") as record:
        text = vllm(fake, verify="warn")("Score?", Score)
    assert text == '{"score": 2}'
    assert record[0].filename == __file__


def test_verify_per_call_wins_and_is_never_sent() -> None:
    fake = FakeServer(chat_body('{"score": 2}'), chat_body('{"score": 2}'))
    model = vllm(fake)
    assert model("Score?", Score, verify=False) == '{"score": 2}'
    assert "verify" not in fake.sent
    with pytest.raises(ConstraintViolationError):
        vllm(fake, verify=False)("Score?", Score, verify=True)


def test_bad_verify_values_are_refused() -> None:
    with pytest.raises(ValueError, match="verify must be"):
        vllm(FakeServer(), verify="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="verify must be"):
        vllm(FakeServer())("x", int, verify=2)


def test_a_cut_answer_is_the_same_error_on_every_method() -> None:
    cut = chat_body('{"score": 0.', finish="length")
    stream = sse(chunk('{"score": '), chunk("0.", finish="length"))
    fake = FakeServer(cut, cut, cut, stream)
    model = vllm(fake)
    for call in (
        lambda: model("x", Score),
        lambda: model.parse("x", Score),
        lambda: model.complete("x", Score),
        lambda: list(model.stream_parse("x", Score)),
    ):
        with pytest.raises(GenerationError) as info:
            call()
        assert info.value.reason == "length"


def test_batch_failures_keep_the_other_results() -> None:
    fake = FakeServer(chat_body("1"), chat_body("x"), chat_body("3"))
    model = vllm(fake)
    with pytest.raises(ConstraintViolationError) as info:
        model.batch(["a", "b", "c"], int, max_concurrency=1)
    results = info.value.batch_results  # type: ignore[attr-defined]
    assert results[0] == "1"
    assert results[1] is info.value
    assert results[2] in ("3", CANCELLED)


def test_batch_warnings_point_at_the_callers_line() -> None:
    cut = chat_body("12", finish="length")
    fake = FakeServer(cut, cut)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert vllm(fake).batch(["a", "b"], int) == ["12", "12"]
    assert [w.filename for w in record] == [__file__, __file__]


async def test_async_batch_warnings_and_errors() -> None:
    cut = chat_body("12", finish="length")
    fake = FakeServer(cut, chat_body("no"))
    amodel = m.from_vllm(fake.aclient(), "tiny")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(ConstraintViolationError) as info:
            await amodel.batch(["a", "b"], int, max_concurrency=1)
    assert info.value.batch_results[0] == "12"  # type: ignore[attr-defined]
    assert [w.filename for w in record] == [__file__]


async def test_async_stream_checks_at_the_end() -> None:
    fake = FakeServer(sse(chunk("ab"), chunk("cd", finish="stop")))
    amodel = m.from_vllm(fake.aclient(), "tiny")
    pieces: list[str] = []

    async def read() -> None:
        async for piece in amodel.stream("x", Regex(r"[a-z]{3}")):
            pieces.append(piece)

    with pytest.raises(ConstraintViolationError):
        await read()
    assert "".join(pieces).startswith("ab")


def test_a_users_response_format_with_an_output_type_is_refused_before_sending() -> None:
    fake = FakeServer()
    model = vllm(fake)
    with pytest.raises(ValueError, match="response_format was given"):
        model("x", Regex("[a-z]"), response_format={"type": "json_object"})
    assert fake.bodies == []


def test_a_list_of_values_is_not_an_output_type() -> None:
    from outlines_like.errors import UnsupportedConstraintError

    with pytest.raises(UnsupportedConstraintError, match="Literal\\['red', 'green'\\]"):
        vllm(FakeServer())("hi", ["red", "green"])


def test_probe_enforcement_passes_on_a_server_that_enforces() -> None:
    fake = FakeServer(chat_body("yes-42"), models=("tiny",), owned_by="sglang")
    model = m.from_server(fake.client(), probe_enforcement=True)  # probes here, at once
    assert model.server == "sglang"
    assert fake.bodies[0]["regex"] == "(yes|no)-[0-9]{2}"
    assert len(fake.bodies) == 1
    fake.answers = [chat_body("7")]
    assert model("x", int) == "7"
    assert len(fake.bodies) == 2  # proved once, not per call


def test_probe_enforcement_reports_a_server_that_ignores_its_fields() -> None:
    from outlines_like.errors import UnsupportedConstraintError

    fake = FakeServer(chat_body("Sure! Here you go."), models=("tiny",), owned_by="vllm")
    with pytest.raises(UnsupportedConstraintError, match="does not enforce") as info:
        m.from_server(fake.client(), probe_enforcement=True)
    assert "structured_outputs" in str(info.value)


def test_probe_enforcement_uses_a_schema_where_no_regex_goes() -> None:
    fake = FakeServer(chat_body('{"n": 150}'))
    model = m.from_openai(fake.client(), "gpt", retry=None)
    model.probe_enforcement = True
    model.detect()
    assert fake.bodies[0]["response_format"]["type"] == "json_schema"


async def test_async_probe_enforcement_at_detect() -> None:
    from outlines_like.errors import UnsupportedConstraintError

    fake = FakeServer(chat_body("no"), models=("tiny",), owned_by="sglang")
    amodel = m.from_server(fake.aclient(), probe_enforcement=True)
    assert fake.bodies == []  # nothing at construction: an async model cannot block there
    with pytest.raises(UnsupportedConstraintError):
        await amodel.detect()
