"""The adapters' fields, sent with the raw ``openai`` SDK to every real server, both endpoints.

The servers come from ``conftest.py`` (the reference server, llama.cpp, vLLM); only the base
URL changes. The reference server speaks vLLM's current dialect.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import jsonschema
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from outlines_like.adapters import get_adapter
from outlines_like.models.detection import detect_server
from outlines_like.types import CFG, JsonSchema, Regex, boolean, to_term

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
DIALECT = {"reference": "vllm", "llamacpp": "llamacpp", "vllm": "vllm"}


def _check_regex(pattern: str) -> Any:
    return lambda text: re.fullmatch(pattern, text) is not None


def _check_schema(text: str) -> bool:
    jsonschema.validate(json.loads(text), SCHEMA)
    return True


ANSWERS = ("answer: yes.", "answer: no.")

# Every constraint is bounded: a random-weight model never closes an unbounded field.
CONSTRAINTS: list[tuple[str, object, Any]] = [
    ("regex", Regex(r"[a-z]{3}-[0-9]{2}"), _check_regex(r"[a-z]{3}-[0-9]{2}")),
    ("literal", Literal["yes", "no", "maybe"], lambda t: t in ("yes", "no", "maybe")),
    ("bool", bool, _check_regex(boolean.pattern)),
    ("schema", JsonSchema(SCHEMA), _check_schema),
    ("lark", CFG('start: "answer: " ("yes" | "no") "."'), lambda t: t in ANSWERS),
    ("gbnf", CFG('root ::= "answer: " ("yes" | "no") "."'), lambda t: t in ANSWERS),
]


@pytest.fixture(params=list(DIALECT))
def server(request: pytest.FixtureRequest) -> tuple[str, openai.OpenAI]:
    running = request.getfixturevalue(f"{request.param}_server")
    return DIALECT[request.param], openai.OpenAI(base_url=running.base_url, api_key="EMPTY")


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize(
    ("name", "output_type", "check"), CONSTRAINTS, ids=[c[0] for c in CONSTRAINTS]
)
def test_constraint_is_enforced(
    server: tuple[str, openai.OpenAI],
    endpoint: Literal["chat", "completions"],
    name: str,
    output_type: object,
    check: Any,
) -> None:
    kind, client = server
    info = detect_server(client)
    assert info.kind == kind
    assert info.model_ids
    fields = get_adapter(info).constraint_fields(to_term(output_type), endpoint=endpoint)
    kw: dict[str, Any] = {
        "model": info.model_ids[0],
        "max_tokens": 200,
        "temperature": 0,
        "extra_body": fields.get("extra_body"),
    }
    if "response_format" in fields:
        kw["response_format"] = fields["response_format"]
    if endpoint == "chat":
        message: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": "Give me the answer."}
        ]
        text = client.chat.completions.create(messages=message, **kw).choices[0].message.content
    else:
        text = client.completions.create(prompt="The answer is", **kw).choices[0].text
    assert text is not None
    assert check(text), (name, text)
