"""Tools: schemas from functions, calls from messages and text, the streaming parser, the loop."""

from __future__ import annotations

import dataclasses
import enum
import itertools
import json
from typing import Any, Literal, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessage
from pydantic import BaseModel

from outlines_like.errors import ParseError, ProviderResponseError, ToolCallParseWarning
from outlines_like.inputs import Chat
from outlines_like.models.result import Completion
from outlines_like.tools import (
    ContentDelta,
    MaxToolStepsError,
    ToolCall,
    ToolCallDelta,
    ToolCallParser,
    arun_tools,
    decode_arguments,
    parse_docstring,
    parse_tool_calls,
    run_tools,
    tool_calls_from_message,
    tool_choice,
    tool_schema,
)


def _ids(i: int) -> str:
    return f"call_{i}"


# ---------------------------------------------------------------- schemas


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


class Place(BaseModel):
    city: str
    country: str = "FR"


def weather(place: Place, unit: Unit = Unit.C, days: Optional[int] = None) -> str:
    """Get the weather forecast.

    Uses the national service.

    Args:
        place: Where to look.
        unit (Unit): The unit,
            celsius or fahrenheit.
        days: How many days ahead.

    Returns:
        A short text.
    """
    return f"{place.city}: sunny in {unit.value} for {days}"


def numpy_style(a: int, b: Literal["x", "y"] = "x") -> None:
    """Add things.

    Parameters
    ----------
    a : int
        The first,
        really.
    b : str
        The second.

    Returns
    -------
    None
    """


def rest_style(a: float, flag: bool = False) -> None:
    """Do it.

    :param a: The amount.
    :param bool flag: Whether to.
    :returns: nothing.
    """


def bare(x, y: list[str]) -> None:  # type: ignore[no-untyped-def]
    pass


def test_tool_schema_google_docstring_pydantic_enum_optional() -> None:
    tool = tool_schema(weather)
    assert tool["type"] == "function"
    fn = tool["function"]
    assert fn["name"] == "weather"
    assert fn["description"] == "Get the weather forecast.\n\nUses the national service."
    params = fn["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["place"]
    props = params["properties"]
    assert props["place"]["description"] == "Where to look."
    assert props["place"]["$ref"] == "#/$defs/Place"
    assert params["$defs"]["Place"]["required"] == ["city"]
    assert props["unit"]["description"] == "The unit, celsius or fahrenheit."
    assert props["unit"]["default"] == "celsius"
    assert props["days"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert props["days"]["default"] is None
    assert "title" not in params
    assert "title" not in props["days"]


@pytest.mark.parametrize(
    ("fn", "description", "params"),
    [
        (numpy_style, "Add things.", {"a": "The first, really.", "b": "The second."}),
        (rest_style, "Do it.", {"a": "The amount.", "flag": "Whether to."}),
        (bare, "", {}),
    ],
)
def test_docstring_styles(fn: Any, description: str, params: dict[str, str]) -> None:
    assert parse_docstring(fn.__doc__) == (description, params)


def test_tool_schema_types_defaults_literal() -> None:
    props = tool_schema(numpy_style)["function"]["parameters"]["properties"]
    assert props["a"] == {"type": "integer", "description": "The first, really."}
    assert props["b"]["enum"] == ["x", "y"]
    assert props["b"]["default"] == "x"
    props = tool_schema(bare)["function"]["parameters"]["properties"]
    assert props["x"] == {}  # no annotation: any JSON value
    assert props["y"] == {"type": "array", "items": {"type": "string"}}


def test_tool_schema_overrides_and_strict() -> None:
    tool = tool_schema(weather, name="wx", description="d", strict=True)
    fn = tool["function"]
    assert (fn["name"], fn["description"], fn.get("strict")) == ("wx", "d", True)
    params = fn["parameters"]
    assert params["required"] == ["place", "unit", "days"]
    assert params["additionalProperties"] is False
    assert params["$defs"]["Place"]["additionalProperties"] is False


def _star(*args: int) -> None: ...


def _kw(**kwargs: int) -> None: ...


@pytest.mark.parametrize(
    ("fn", "kwargs", "error", "match"),
    [
        (_star, {}, TypeError, r"\*args/\*\*kwargs"),
        (_kw, {}, TypeError, r"\*args/\*\*kwargs"),
        (lambda x: x, {}, TypeError, "no usable name"),
        (42, {}, TypeError, "must be a function"),
        (weather, {"name": "bad name!"}, ValueError, "not allowed"),
    ],
)
def test_tool_schema_rejects(fn: Any, kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        tool_schema(fn, **kwargs)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("required", "required"),
        ("auto", "auto"),
        ("none", "none"),
        ("get_weather", {"type": "function", "function": {"name": "get_weather"}}),
        (weather, {"type": "function", "function": {"name": "weather"}}),
    ],
)
def test_tool_choice(target: Any, expected: object) -> None:
    assert tool_choice(target) == expected


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


# ---------------------------------------------------------------- tool loop


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


@dataclasses.dataclass
class Point:
    x: int
    y: int


def norm1(p: Point, /) -> dict[str, int]:
    """L1 norm of a point."""
    return {"norm": abs(p.x) + abs(p.y)}


def boom() -> str:
    """Fail."""
    raise RuntimeError("kaput")


async def async_add(a: int, b: int) -> int:
    """Add, asynchronously."""
    return a + b


class ScriptedModel:
    """A model whose completions are scripted; records every request."""

    def __init__(self, replies: list[Completion]) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []

    def complete(self, prompt: Any, **kwargs: Any) -> Completion:
        assert isinstance(prompt, Chat)
        self.requests.append((json.loads(json.dumps(prompt.messages)), kwargs))
        return self.replies.pop(0)


class AsyncScriptedModel(ScriptedModel):
    async def complete(self, prompt: Any, **kwargs: Any) -> Completion:  # type: ignore[override]
        return ScriptedModel.complete(self, prompt, **kwargs)


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> Completion:
    return Completion(
        text="",
        tool_calls=tuple(ToolCall(i, n, a) for i, n, a in calls),
        finish_reason="tool_calls",
    )


def test_run_tools_loop() -> None:
    model = ScriptedModel(
        [
            _calls(("c1", "add", {"a": 2, "b": 3}), ("c2", "norm1", {"p": {"x": -1, "y": 2}})),
            Completion(text="5 and 3", finish_reason="stop"),
        ]
    )
    run = run_tools(model, "add 2 and 3", [add, norm1], temperature=0, tool_choice="required")
    assert run.text == "5 and 3"
    assert run.steps == 2
    assert [r.output for r in run.results] == [5, {"norm": 3}]
    first_messages, first_kw = model.requests[0]
    assert first_messages == [{"role": "user", "content": "add 2 and 3"}]
    assert [t["function"]["name"] for t in first_kw["tools"]] == ["add", "norm1"]
    assert first_kw["temperature"] == 0
    assert first_kw["tool_choice"] == "required"
    second_messages, second_kw = model.requests[1]
    assert "tool_choice" not in second_kw  # forced only on the first step
    assert second_messages[1]["tool_calls"][0] == {
        "id": "c1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
    }
    assert second_messages[2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
        {"role": "tool", "tool_call_id": "c2", "content": '{"norm": 3}'},
    ]
    assert run.messages[-1] == {"role": "assistant", "content": "5 and 3"}


def test_run_tools_reports_bad_calls_to_the_model() -> None:
    model = ScriptedModel(
        [
            _calls(("c1", "nope", {}), ("c2", "add", {"a": "x"})),
            Completion(text="sorry"),
        ]
    )
    run = run_tools(model, [{"role": "user", "content": "hi"}], [add])
    errors = [r.content for r in run.results]
    assert errors[0] == "error: unknown tool 'nope'; the tools are: add"
    assert errors[1].startswith("error: invalid arguments for add")
    assert "'b'" in errors[1] or "b\n" in errors[1]


def test_run_tools_step_limit() -> None:
    model = ScriptedModel([_calls(("c", "add", {"a": 1, "b": 1}))] * 3)
    with pytest.raises(MaxToolStepsError, match="max_steps=3") as info:
        run_tools(model, "loop", [add], max_steps=3)
    assert info.value.steps == 3
    assert info.value.messages[-1]["role"] == "tool"


def test_run_tools_tool_errors_raise_or_are_reported() -> None:
    model = ScriptedModel([_calls(("c", "boom", {}))])
    with pytest.raises(RuntimeError, match="kaput"):
        run_tools(model, "go", [boom])
    model = ScriptedModel([_calls(("c", "boom", {})), Completion(text="ok")])
    run = run_tools(model, "go", [boom], catch_errors=True)
    assert run.results[0].content == "error: RuntimeError: kaput"


def test_run_tools_rejects_async_tools_and_bad_input() -> None:
    model = ScriptedModel([_calls(("c", "async_add", {"a": 1, "b": 2}))])
    with pytest.raises(TypeError, match="use arun_tools"):
        run_tools(model, "go", [async_add])
    with pytest.raises(ValueError, match="max_steps"):
        run_tools(ScriptedModel([]), "go", [add], max_steps=0)
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        run_tools(ScriptedModel([]), "go", [add, add])
    with pytest.raises(TypeError, match="prompt string"):
        run_tools(ScriptedModel([]), 42, [add])


async def test_arun_tools_runs_sync_and_async_tools() -> None:
    model = AsyncScriptedModel(
        [
            _calls(("c1", "async_add", {"a": 1, "b": 2}), ("c2", "add", {"a": 3, "b": 4})),
            Completion(text="3 and 7"),
        ]
    )
    run = await arun_tools(model, "go", [async_add, add])
    assert run.text == "3 and 7"
    assert [r.output for r in run.results] == [3, 7]
