"""Tool calls read from messages and text (``outlines_like.tools.calls``)."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessage

from outlines_like.errors import ParseError, ProviderResponseError, ToolCallParseWarning
from outlines_like.messages import ToolCall
from outlines_like.tools import (
    decode_arguments,
    parse_tool_calls,
    tool_calls_from_message,
)


def _ids(i: int) -> str:
    return f"call_{i}"


# ---------------------------------------------------------------- reading calls


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            {"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x": 1}'}}]},
            [ToolCall("a", "f", {"x": 1})],
        ),
        (  # TGI: arguments as an object, description null
            {
                "tool_calls": [
                    {
                        "id": "0",
                        "function": {"description": None, "name": "f", "arguments": {"x": 1}},
                    }
                ]
            },
            [ToolCall("0", "f", {"x": 1})],
        ),
        (  # a single call sent as an object; no id
            {"tool_calls": {"function": {"name": "f", "arguments": ""}}},
            [ToolCall("call_0", "f", {})],
        ),
        ({"function_call": {"name": "old", "arguments": "{}"}}, [ToolCall("call_0", "old", {})]),
        ({"content": "hi"}, []),
        (
            ChatCompletionMessage.model_validate(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "g", "arguments": "{}"},
                        },
                        {
                            "id": "c2",
                            "type": "function",
                            "function": {"name": "h", "arguments": '{"a": [1]}'},
                        },
                    ],
                }
            ),
            [ToolCall("c1", "g", {}), ToolCall("c2", "h", {"a": [1]})],
        ),
    ],
)
def test_tool_calls_from_message(message: object, expected: list[ToolCall]) -> None:
    assert tool_calls_from_message(message, id_factory=_ids) == expected


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ('{"x": ', "not valid JSON"),
        ("[1]", "should be a JSON object"),
        (3, "JSON string or an object"),
    ],
)
def test_decode_arguments_errors(arguments: object, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        decode_arguments(arguments, tool="f")


def test_tool_call_without_name_is_a_provider_error() -> None:
    with pytest.raises(ProviderResponseError, match="no function name"):
        tool_calls_from_message({"tool_calls": [{"id": "x", "function": {"arguments": "{}"}}]})


@pytest.mark.parametrize(
    ("text", "calls", "rest"),
    [
        ('<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', [("f", {"a": 1})], ""),
        (
            'Sure.\n<tool_call>\n  {"name": "f", "arguments": {}}\n</tool_call>\n'
            '<tool_call>{"name": "g", "parameters": {"b": "x"}}</tool_call>',
            [("f", {}), ("g", {"b": "x"})],
            "Sure.",
        ),
        (
            '<tool_call>{"name": "f", "arguments": "{\\"a\\": 2}"}</tool_call>',
            [("f", {"a": 2})],
            "",
        ),
        ('<tool_call>{"name": "f", "arguments": {"a": 1}}', [("f", {"a": 1})], ""),  # cut at EOS
        ("no calls <b>here</b>", [], "no calls <b>here</b>"),
    ],
)
def test_parse_tool_calls(text: str, calls: list[tuple[str, dict[str, Any]]], rest: str) -> None:
    got, remaining = parse_tool_calls(text, id_factory=_ids)
    assert [(c.name, c.arguments) for c in got] == calls
    assert [c.id for c in got] == [f"call_{i}" for i in range(len(calls))]
    assert remaining == rest


@pytest.mark.parametrize(
    ("block", "why"),
    [
        ('{"name": "f", "arguments": {"a": </tool_call>', "not valid JSON"),
        ('["f"]</tool_call>', "not a JSON object"),
        ('{"arguments": {}}</tool_call>', "no 'name'"),
        ('{"name": "f", "arguments": [1]}</tool_call>', "'arguments' is not a JSON object"),
    ],
)
def test_malformed_tool_call_warns_and_stays_in_text(block: str, why: str) -> None:
    text = '<tool_call>{"name": "ok", "arguments": {}}</tool_call> <tool_call>' + block
    with pytest.warns(ToolCallParseWarning, match=why):
        calls, rest = parse_tool_calls(text, id_factory=_ids)
    assert [c.name for c in calls] == ["ok"]
    assert rest == "<tool_call>" + block
    with pytest.raises(ParseError, match=why):
        parse_tool_calls(text, strict=True)
