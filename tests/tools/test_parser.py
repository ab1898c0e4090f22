"""The streaming tool-call parser (``outlines_like.tools.parser``)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outlines_like.errors import ToolCallParseWarning
from outlines_like.messages import ToolCall
from outlines_like.tools import (
    ContentDelta,
    ToolCallDelta,
    ToolCallParser,
    parse_tool_calls,
)


def _ids(i: int) -> str:
    return f"call_{i}"


# ---------------------------------------------------------------- streaming parser


def _drive(
    parser: ToolCallParser, chunks: list[str]
) -> tuple[str, dict[int, list[str]], list[Any]]:
    """Feed chunks; check the argument-prefix contract at every step."""
    content = ""
    names: dict[int, str] = {}
    args: dict[int, list[str]] = {}
    answers: list[Any] = []
    for chunk in [*chunks, None]:
        out = parser.finish() if chunk is None else parser.parse_delta(chunk)
        answers.append(out)
        for d in out or []:
            if isinstance(d, ContentDelta):
                content += d.text
            else:
                assert isinstance(d, ToolCallDelta)
                if d.name is not None:
                    assert d.index not in names, "the name is sent once"
                    assert d.id is not None
                    names[d.index] = d.name
                assert d.index in names, "arguments come after the name"
                args.setdefault(d.index, []).append(d.arguments)
    return content, args, answers


TOOL_TEXTS = [
    'Let me check. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa\\"ris", '
    '"days": [1, 2.5e3, -0.5], "ok": true, "none": null, "nested": {"k": "\\u00e9"}}}\n'
    "</tool_call>",
    '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", '
    '"arguments": {"x": "<tool_call>"}}</tool_call> after',
    '<tool_call>{"arguments": {"x": 1}, "name": "late_name"}</tool_call>',
    '<tool_call>{"name": "enc", "arguments": "{\\"x\\": 1}"}</tool_call>',
    "no tools at all, just < and </ and <tool",
]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), which=st.integers(0, len(TOOL_TEXTS) - 1))
def test_streamed_arguments_are_growing_prefixes_of_valid_json(
    data: st.DataObject, which: int
) -> None:
    text = TOOL_TEXTS[which]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=12)))
    bounds = [0, *cuts, len(text)]
    chunks = [text[i:j] for i, j in itertools.pairwise(bounds)]
    parser = ToolCallParser(id_factory=_ids)
    content, args, _ = _drive(parser, chunks)
    expected_calls, expected_rest = parse_tool_calls(text, id_factory=_ids)
    assert content.strip() == expected_rest
    assert [c.arguments for c in parser.calls] == [c.arguments for c in expected_calls]
    for index, pieces in args.items():
        whole = "".join(pieces)
        assert json.loads(whole) == expected_calls[index].arguments
        for k in range(len(pieces)):
            assert whole.startswith("".join(pieces[: k + 1]))


def test_parse_delta_answers_none_list_or_empty() -> None:
    parser = ToolCallParser(id_factory=_ids)
    assert parser.parse_delta("Hi <tool") is not None  # "Hi " goes out, "<tool" is held
    assert parser.parse_delta("_ca") is None  # still maybe a tag: needs more tokens
    out = parser.parse_delta('ll>{"na')
    assert out == []  # consumed inside a tool-call section
    out = parser.parse_delta('me": "f", "arguments": {"a"')
    assert out == [ToolCallDelta(0, id="call_0", name="f"), ToolCallDelta(0, arguments='{"a"')]
    assert parser.parse_delta(": 1}}</tool_call>") == [ToolCallDelta(0, arguments=": 1}")]
    assert parser.finish() == []
    assert parser.calls == [ToolCall("call_0", "f", {"a": 1})]
    assert ToolCallDelta(0, id="x", name="f").to_openai() == {
        "index": 0,
        "id": "x",
        "type": "function",
        "function": {"arguments": "", "name": "f"},
    }


def test_held_text_that_is_not_a_tag_is_released() -> None:
    parser = ToolCallParser()
    assert parser.parse_delta("a <tool") == [ContentDelta("a ")]
    assert parser.parse_delta("box") == [ContentDelta("<toolbox")]
    assert parser.parse_delta("<t") is None
    assert parser.finish() == [ContentDelta("<t")]


def test_blank_text_between_and_after_calls_is_not_content() -> None:
    parser = ToolCallParser(id_factory=_ids)
    text = 'Sure.\n<tool_call>{"name": "a", "arguments": {}}</tool_call>\n\n<tool_call>'
    text += '{"name": "b", "arguments": {}}</tool_call>\n'
    content, _, _ = _drive(parser, list(text))
    assert content == "Sure.\n"
    assert [c.name for c in parser.calls] == ["a", "b"]
    parser = ToolCallParser(id_factory=_ids)
    content, _, _ = _drive(parser, ['<tool_call>{"name": "a"}</tool_call>\n', " ", "ok"])
    assert content == "\n ok"


def test_unterminated_call_is_closed_at_finish() -> None:
    parser = ToolCallParser(id_factory=_ids)
    _, args, _ = _drive(parser, ['<tool_call>{"name": "f", "arguments": {"a": 1}}'])
    assert "".join(args[0]) == '{"a": 1}'
    assert parser.calls == [ToolCall("call_0", "f", {"a": 1})]


def test_malformed_streamed_call_warns() -> None:
    for body in ['{"name": "f", "arguments": {"a": }}', '{"name": "f", "arguments": {"a": ]}']:
        parser = ToolCallParser(id_factory=_ids)
        with pytest.warns(ToolCallParseWarning, match="unreadable"):
            out = parser.parse_delta(f"<tool_call>{body}</tool_call>")
        assert out == [
            ToolCallDelta(0, id="call_0", name="f"),
            ToolCallDelta(0, arguments='{"a": '),
        ]
        assert parser.calls == []


def test_parse_complete_matches_parse_tool_calls() -> None:
    text = TOOL_TEXTS[1]
    parser = ToolCallParser(id_factory=_ids)
    assert parser.parse_complete(text) == parse_tool_calls(text, id_factory=_ids)
