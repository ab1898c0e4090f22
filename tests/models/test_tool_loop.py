"""The tool loop (``outlines_like.models.tool_loop``): one flow, sync and async drivers."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from outlines_like.inputs import Chat
from outlines_like.messages import Completion, ToolCall
from outlines_like.models.tool_loop import arun_tools, run_tools
from outlines_like.tools import (
    MaxToolStepsError,
)

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
