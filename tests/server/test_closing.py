"""The reference server closes constrained answers within max_tokens, or refuses with a 400."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from outlines_like.server.dialects import RequestError
from outlines_like.server.validation import validate_chat

pytestmark = pytest.mark.torch

MESSAGES = [{"role": "user", "content": "Describe a person."}]
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "tags"],
}
GRAMMAR = 'start: "answer: " item ("," item)* "."\nitem: "yes" | "no" | "maybe"'


@pytest.fixture
def svc(service: Any) -> Any:
    service.start()
    return service


@pytest.mark.parametrize(
    ("body", "check"),
    [
        (
            {"extra_body": {"structured_outputs": {"json": SCHEMA}}},
            lambda text: jsonschema.validate(json.loads(text), SCHEMA),
        ),
        (
            {"extra_body": {"structured_outputs": {"grammar": GRAMMAR}}},
            lambda text: __import__("lark").Lark(GRAMMAR, parser="lalr").parse(text),
        ),
    ],
    ids=["json_schema", "grammar"],
)
def test_an_answer_at_a_tight_max_tokens_is_valid_with_finish_reason_length(
    client: Any, body: dict[str, Any], check: Any
) -> None:
    """The shortest answer's token count (and a few more): the answer closes valid."""
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=1, **body)
    assert info.value.status_code == 400
    assert "cannot fit a valid answer" in str(info.value)
    lengths = 0
    for max_tokens in range(2, 40, 3):
        try:
            out = client.chat.completions.create(
                model="tiny",
                messages=MESSAGES,
                max_tokens=max_tokens,
                temperature=1.0,
                seed=max_tokens,
                **body,
            )
        except openai.BadRequestError:
            continue  # below the shortest answer
        choice = out.choices[0]
        check(choice.message.content)
        assert out.usage.completion_tokens <= max_tokens
        lengths += choice.finish_reason == "length"
    assert lengths  # the random-weight model runs to the limit: it had to close


async def test_max_tokens_below_the_shortest_answer_is_refused(svc: Any) -> None:
    body = {"messages": MESSAGES, "max_tokens": 3, "response_format": _format()}
    with pytest.raises(RequestError) as info:
        await svc.prepare_chat(validate_chat(body, svc.config))
    assert (info.value.param, info.value.code, info.value.status) == (
        "max_tokens",
        "max_tokens_too_small",
        400,
    )
    assert "max_tokens=3 cannot fit a valid answer" in info.value.message


def _format() -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
