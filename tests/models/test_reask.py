"""Reask (``retries=``): what is sent after a validation failure, and every attempt kept."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pydantic
import pytest

import outlines_like as ol
import outlines_like.models as m
from outlines_like.errors import (
    ConstraintViolationError,
    GenerationError,
    ParseError,
    TruncatedOutputWarning,
)
from outlines_like.inputs import Chat
from outlines_like.messages import Attempt, Completion, Usage
from outlines_like.models.reask import (
    DEFAULT_TEMPLATE,
    Ask,
    Reasked,
    ReaskPolicy,
    describe,
    reask_flow,
    reask_policy,
)
from outlines_like.types import parse
from tests.conftest import FakeServer, chat_body, chunk, sse


class Hero(pydantic.BaseModel):
    name: str
    level: int

    @pydantic.field_validator("name")
    @classmethod
    def starts_with_a(cls, name: str) -> str:
        if not name.startswith("A"):
            raise ValueError("the name must start with 'A'")
        return name


BOB = '{"name": "Bob", "level": 1}'
CARL = '{"name": "Carl", "level": 2}'
ADA = '{"name": "Ada", "level": 3}'
USAGE = Usage(3, 2, 5)


def _model(fake: FakeServer) -> m.Model:
    return m.from_vllm(fake.client(), "tiny")


def _contents(body: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(msg["role"], msg["content"]) for msg in body["messages"]]


# -- the flow, without I/O


def test_the_flow_asks_again_with_the_answer_and_the_error() -> None:
    flow = reask_flow(
        "Name a hero.", ReaskPolicy(max_retries=2), lambda cs: parse(Hero, cs[0].text)
    )
    step = next(flow)
    assert step == Ask("Name a hero.", 1)
    step = flow.send([Completion(BOB, usage=USAGE)])
    assert isinstance(step, Ask)
    assert step.attempt == 2
    assert isinstance(step.prompt, Chat)
    roles = [msg["role"] for msg in step.prompt.messages]
    assert roles == ["user", "assistant", "user"]
    assert step.prompt.messages[1]["content"] == BOB
    assert "must start with 'A'" in step.prompt.messages[2]["content"]
    with pytest.raises(StopIteration) as stop:
        flow.send([Completion(ADA, usage=USAGE)])
    done = stop.value.value
    assert isinstance(done, Reasked)
    assert done.value == Hero(name="Ada", level=3)
    assert [a.text for a in done.completion.attempts] == [BOB, ADA]


def test_flow_reads_with_pydantic_errors_listed_per_field() -> None:
    try:
        parse(Hero, '{"name": "Bob", "level": "x"}')
    except ParseError as error:
        text = describe(error)
    assert text.splitlines() == [
        "- name: Value error, the name must start with 'A'",
        "- level: Input should be a valid integer, unable to parse string as an integer",
    ]
    assert describe(ParseError("cannot read 'x' as int", text="x")) == "- cannot read 'x' as int"


def test_reask_policy_arguments() -> None:
    assert reask_policy(0) is None
    assert reask_policy(ReaskPolicy(max_retries=0)) is None
    assert reask_policy(3) == ReaskPolicy(max_retries=3)
    custom = ReaskPolicy(1, message=lambda a: "again")
    assert reask_policy(custom) is custom
    for bad in (True, "2", None, 1.5):
        with pytest.raises(TypeError, match="retries"):
            reask_policy(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=">= 0"):
        reask_policy(-1)
    with pytest.raises(ValueError, match="errors"):
        ReaskPolicy(template="fix {error}")
    with pytest.raises(TypeError, match="callable"):
        ReaskPolicy(message="fix it")  # type: ignore[arg-type]
    assert "{errors}" in DEFAULT_TEMPLATE


# -- Model.parse


def test_parse_asks_again_until_the_validators_pass() -> None:
    fake = FakeServer(chat_body(BOB), chat_body(CARL), chat_body(ADA))
    model = _model(fake)
    assert model.parse("Name a hero.", Hero, retries=2) == Hero(name="Ada", level=3)
    assert len(fake.bodies) == 3
    first, second, third = fake.bodies
    assert _contents(first) == [("user", "Name a hero.")]
    assert _contents(second)[:2] == [("user", "Name a hero."), ("assistant", BOB)]
    assert second["messages"][2]["role"] == "user"
    assert "name: Value error, the name must start with 'A'" in second["messages"][2]["content"]
    assert [role for role, _ in _contents(third)] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert third["messages"][3]["content"] == CARL
    # the same constraint every time
    assert (
        first["structured_outputs"] == second["structured_outputs"] == third["structured_outputs"]
    )
    assert model.usage == Usage(9, 6, 15)


def test_exhausted_budget_raises_with_every_attempt() -> None:
    fake = FakeServer(
        chat_body(BOB), chat_body(CARL, usage={"prompt_tokens": 7, "completion_tokens": 4})
    )
    model = _model(fake)
    with pytest.raises(ParseError, match="must start with 'A'") as caught:
        model.parse("Name a hero.", Hero, retries=1)
    error = caught.value
    assert not isinstance(error, ConstraintViolationError)
    assert [a.text for a in error.attempts] == [BOB, CARL]
    assert all(isinstance(a, Attempt) and a.error is not None for a in error.attempts)
    assert error.attempts[-1].error is error
    assert [a.usage for a in error.attempts] == [USAGE, Usage(7, 4, 11)]
    assert error.attempts[0].feedback is not None
    assert "start with 'A'" in error.attempts[0].feedback
    assert error.attempts[-1].feedback is None  # nobody was asked after the last one
    assert isinstance(error.__cause__, pydantic.ValidationError)
    assert model.usage == Usage(10, 6, 16)


def test_without_retries_nothing_is_asked_again() -> None:
    fake = FakeServer(chat_body(BOB), chat_body(ADA))
    with pytest.raises(ParseError) as caught:
        _model(fake).parse("Name a hero.", Hero)
    assert len(fake.bodies) == 1
    assert caught.value.attempts == ()


def test_a_constraint_violation_is_never_asked_again() -> None:
    fake = FakeServer(chat_body('{"nom": "Ada"}'), chat_body(ADA))
    with pytest.raises(ConstraintViolationError) as caught:
        _model(fake).parse("Name a hero.", Hero, retries=3)
    assert len(fake.bodies) == 1
    assert [a.text for a in caught.value.attempts] == ['{"nom": "Ada"}']


def test_a_violation_after_a_retry_keeps_the_earlier_attempts() -> None:
    fake = FakeServer(chat_body(BOB), chat_body('{"nom": "Ada"}'))
    with pytest.raises(ConstraintViolationError) as caught:
        _model(fake).parse("Name a hero.", Hero, retries=3)
    assert [a.text for a in caught.value.attempts] == [BOB, '{"nom": "Ada"}']


def test_a_cut_answer_is_never_asked_again() -> None:
    fake = FakeServer(chat_body('{"name": "Bo', finish="length"), chat_body(ADA))
    with pytest.raises(GenerationError):
        _model(fake).parse("Name a hero.", Hero, retries=3)
    assert len(fake.bodies) == 1


def test_a_cut_answer_that_fits_but_fails_validation_is_not_asked_again() -> None:
    fake = FakeServer(chat_body(BOB, finish="length"), chat_body(ADA))
    with pytest.warns(TruncatedOutputWarning) as record, pytest.raises(ParseError) as caught:
        _model(fake).parse("Name a hero.", Hero, retries=3)
    assert len(fake.bodies) == 1
    assert len(caught.value.attempts) == 1
    assert record[0].filename == __file__  # warnings point at the caller's line


def test_with_verify_off_a_misfit_is_asked_again() -> None:
    fake = FakeServer(chat_body('{"nom": "Ada"}'), chat_body(ADA))
    assert _model(fake).parse("Name a hero.", Hero, retries=1, verify=False).name == "Ada"
    assert len(fake.bodies) == 2
    assert "verify" not in fake.sent
    assert "retries" not in fake.sent


def test_chat_prompts_are_extended_not_replaced() -> None:
    fake = FakeServer(chat_body(BOB), chat_body(ADA))
    chat = Chat([{"role": "system", "content": "Be brief."}]).add_user("Name a hero.")
    _model(fake).parse(chat, Hero, retries=1)
    roles = [role for role, _ in _contents(fake.sent)]
    assert roles == ["system", "user", "assistant", "user"]
    assert len(chat) == 2  # the caller's chat is not mutated


def test_a_list_prompt_keeps_its_parts() -> None:
    fake = FakeServer(chat_body(BOB), chat_body(ADA))
    _model(fake).parse(["Name a hero", " from the north."], Hero, retries=1)
    assert fake.sent["messages"][0]["content"] == [
        {"type": "text", "text": "Name a hero"},
        {"type": "text", "text": " from the north."},
    ]


def test_the_policy_writes_the_follow_up() -> None:
    fake = FakeServer(chat_body(BOB), chat_body(CARL), chat_body(ADA))
    seen: list[Attempt] = []

    def message(attempt: Attempt) -> str:
        seen.append(attempt)
        return f"No. {attempt.text} is wrong."

    _model(fake).parse("Name a hero.", Hero, retries=ReaskPolicy(max_retries=2, message=message))
    assert fake.sent["messages"][-1] == {"role": "user", "content": f"No. {CARL} is wrong."}
    assert [a.text for a in seen] == [BOB, CARL]

    fake = FakeServer(chat_body(BOB), chat_body(ADA))
    policy = ReaskPolicy(max_retries=1, template="Wrong ({text}):\n{errors}")
    _model(fake).parse("Name a hero.", Hero, retries=policy)
    assert fake.sent["messages"][-1]["content"].startswith(f"Wrong ({BOB}):\n- name:")


def test_retries_need_one_answer_and_a_chat() -> None:
    fake = FakeServer()
    with pytest.raises(ValueError, match="n=2"):
        _model(fake).parse("x", Hero, retries=1, n=2)
    raw = m.from_vllm(fake.client(), "tiny", endpoint="completions")
    with pytest.raises(ValueError, match="chat endpoint"):
        raw.parse("x", Hero, retries=1)
    assert fake.bodies == []


def test_complete_returns_the_answer_kept_with_every_attempt() -> None:
    fake = FakeServer(chat_body(BOB), chat_body(ADA))
    completion = _model(fake).complete("Name a hero.", Hero, retries=2)
    assert isinstance(completion, Completion)
    assert completion.text == ADA
    assert [a.text for a in completion.attempts] == [BOB, ADA]
    assert completion.attempts[-1].error is None
    assert isinstance(completion.attempts[0].error, ParseError)
    assert _model(FakeServer(chat_body(ADA))).complete("x", Hero).attempts == ()


def test_generator_passes_retries_on() -> None:
    fake = FakeServer(chat_body(BOB), chat_body(ADA))
    assert ol.Generator(_model(fake), Hero).parse("x", retries=1).name == "Ada"


def _answers_by_turn(request: httpx2.Request) -> httpx2.Response:
    """Bob for a first question, Ada once told what was wrong (any order of requests)."""
    messages = json.loads(request.content)["messages"]
    text = ADA if len(messages) > 1 else BOB
    if messages[0]["content"] == "never":
        text = BOB
    return httpx2.Response(200, json=chat_body(text))


def test_batch_reasks_each_item_and_returns_texts() -> None:
    fake = FakeServer(*[_answers_by_turn] * 10)
    texts = _model(fake).batch(["a", "b", "c"], Hero, retries=1)
    assert texts == [ADA, ADA, ADA]
    assert len(fake.bodies) == 6


def test_batch_failures_carry_their_attempts() -> None:
    fake = FakeServer(*[_answers_by_turn] * 10)
    out = _model(fake).batch(["a", "never"], Hero, retries=1, return_exceptions=True)
    assert out[0] == ADA
    assert isinstance(out[1], ParseError)
    assert [a.text for a in out[1].attempts] == [BOB, BOB]


# -- streams


def _stream(text: str, cut: int = 7) -> httpx2.Response:
    pieces = [text[i : i + cut] for i in range(0, len(text), cut)]
    return sse(*(chunk(p) for p in pieces), chunk(finish="stop"))


def test_stream_parse_starts_again_and_ends_with_the_valid_value() -> None:
    fake = FakeServer(_stream(BOB), _stream(ADA))
    values = list(_model(fake).stream_parse("Name a hero.", Hero, retries=1))
    assert values[-1] == Hero(name="Ada", level=3)
    # a validated Hero appears once, at the end: the rejected answer yields partials only
    assert sum(type(v) is Hero and v.model_fields_set == {"name", "level"} for v in values) >= 1
    names = [getattr(v, "name", None) for v in values]
    assert "Bob" in names  # partial values of the rejected attempt were shown
    assert names.index("Bob") < names.index("Ada")
    assert _contents(fake.sent)[1] == ("assistant", BOB)
    assert "must start with 'A'" in fake.sent["messages"][2]["content"]


def test_stream_parse_exhausted_raises_with_every_attempt() -> None:
    fake = FakeServer(_stream(BOB), _stream(CARL))
    with pytest.raises(ParseError) as caught:
        list(_model(fake).stream_parse("Name a hero.", Hero, retries=1))
    assert [a.text for a in caught.value.attempts] == [BOB, CARL]


def test_stream_parse_violation_is_raised_not_asked_again() -> None:
    fake = FakeServer(_stream('{"name": "Ada", "level": 3} extra'), _stream(ADA))
    with pytest.raises(ConstraintViolationError):
        list(_model(fake).stream_parse("Name a hero.", Hero, retries=2))
    assert len(fake.bodies) == 1


# -- async


async def test_async_parse_complete_and_batch() -> None:
    fake = FakeServer(chat_body(BOB), chat_body(ADA), chat_body(BOB), chat_body(ADA))
    amodel = m.from_vllm(fake.aclient(), "tiny")
    assert (await amodel.parse("x", Hero, retries=1)).name == "Ada"
    completion = await amodel.complete("x", Hero, retries=1)
    assert isinstance(completion, Completion)
    assert [a.text for a in completion.attempts] == [BOB, ADA]
    assert amodel.usage == Usage(12, 8, 20)

    fake = FakeServer(*[_answers_by_turn] * 10)
    amodel = m.from_vllm(fake.aclient(), "tiny")
    assert await amodel.batch(["a", "b"], Hero, retries=1) == [ADA, ADA]
    with pytest.raises(ParseError) as caught:
        await amodel.parse("never", Hero, retries=2)
    assert len(caught.value.attempts) == 3


async def test_async_stream_parse() -> None:
    fake = FakeServer(_stream(BOB), _stream(ADA))
    amodel = m.from_vllm(fake.aclient(), "tiny")
    values = [v async for v in amodel.stream_parse("x", Hero, retries=1)]
    assert values[-1] == Hero(name="Ada", level=3)
    assert len(fake.bodies) == 2


async def test_generators_pass_retries_to_stream_parse() -> None:
    fake = FakeServer(_stream(BOB), _stream(ADA))
    gen = ol.Generator(_model(fake), Hero)
    assert list(gen.stream_parse("x", retries=1))[-1] == Hero(name="Ada", level=3)
    assert "retries" not in fake.sent
    fake = FakeServer(_stream(BOB), _stream(ADA))
    agen = ol.Generator(m.from_vllm(fake.aclient(), "tiny"), Hero)
    assert [v async for v in agen.stream_parse("x", retries=1)][-1].name == "Ada"
