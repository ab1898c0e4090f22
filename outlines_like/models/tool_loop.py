"""The tool loop: the model asks for calls, the functions run, their answers go back.

It sits above the models (it calls ``model.complete``) and below nothing: the flow is
written once, free of I/O, as a generator (:func:`tool_flow`) that yields what to do next
(``Ask`` the model, ``Invoke`` a tool) and receives the result, in the shape of
``models.retry``; :func:`run_tools` and :func:`arun_tools` are its sync and async drivers.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any, Protocol

import pydantic

from outlines_like.errors import MaxToolStepsError
from outlines_like.inputs import Chat
from outlines_like.messages import Completion, ToolCall
from outlines_like.tools.schema import ToolSpec, read_tool, tool_schema

__all__ = [
    "Ask",
    "Invoke",
    "Outcome",
    "ToolResult",
    "ToolRun",
    "arun_tools",
    "run_tools",
    "tool_flow",
]


class _CompletingModel(Protocol):
    def complete(self, prompt: Any, **kwargs: Any) -> Completion | list[Completion]: ...


class _AsyncCompletingModel(Protocol):
    def complete(self, prompt: Any, **kwargs: Any) -> Awaitable[Completion | list[Completion]]: ...


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """One executed call: what the function returned, and what the model was told."""

    call: ToolCall
    output: object
    content: str
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class ToolRun:
    """The end of a tool loop.

    Attributes:
        text: The model's final answer.
        completion: The final completion (reasoning, usage, finish reason...).
        messages: The whole conversation, final answer included.
        results: Every executed call, in order.
        steps: How many model calls were made.
    """

    text: str
    completion: Completion
    messages: list[dict[str, Any]]
    results: list[ToolResult]
    steps: int


@dataclasses.dataclass(frozen=True)
class Ask:
    """Flow step: call ``model.complete`` on the conversation so far."""

    messages: list[dict[str, Any]]
    kwargs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Invoke:
    """Flow step: run one tool with validated arguments; answer with an :class:`Outcome`."""

    fn: Callable[..., object]
    args: list[object]
    kwargs: dict[str, object]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a tool returned, or the exception it raised."""

    value: object = None
    error: BaseException | None = None


ToolFlow = Generator[Ask | Invoke, object, ToolRun]
"""The tool loop without I/O: yields steps, receives their answers, returns the run."""


def _to_messages(prompt: object) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    messages = getattr(prompt, "messages", prompt)
    if isinstance(messages, Sequence) and all(isinstance(m, Mapping) for m in messages):
        return [dict(m) for m in messages]
    raise TypeError(
        "run_tools takes a prompt string, a list of OpenAI message dicts, or a Chat; "
        f"got {type(prompt).__name__}"
    )


def _render(output: object) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, pydantic.BaseModel):
        return output.model_dump_json()
    try:
        return json.dumps(output, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(output)


def tool_flow(
    prompt: object,
    tools: Sequence[Callable[..., object]],
    max_steps: int,
    catch_errors: bool,
    kwargs: dict[str, Any],
) -> ToolFlow:
    """The tool loop, free of I/O: yields what to do, receives the result."""
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    specs: dict[str, ToolSpec] = {}
    for fn in tools:
        spec = read_tool(fn)
        if spec.name in specs:
            raise ValueError(f"two tools are named {spec.name!r}")
        specs[spec.name] = spec
    schemas = [tool_schema(spec.fn) for spec in specs.values()]
    messages = _to_messages(prompt)
    results: list[ToolResult] = []
    request = {k: v for k, v in kwargs.items() if k != "tools"}
    for step in range(1, max_steps + 1):
        if step > 1:
            # A forced tool_choice applies to the first call only, or the loop never ends.
            request.pop("tool_choice", None)
        completion = yield Ask(list(messages), {**request, "tools": schemas})
        if not isinstance(completion, Completion):
            raise TypeError(
                f"model.complete() returned {type(completion).__name__}, expected one Completion"
                " (the tool loop follows one answer: do not pass n > 1)"
            )
        if not completion.tool_calls:
            messages.append({"role": "assistant", "content": completion.text})
            return ToolRun(completion.text, completion, messages, results, step)
        messages.append(
            {
                "role": "assistant",
                "content": completion.text or None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": json.dumps(call.arguments, ensure_ascii=False),
                        },
                    }
                    for call in completion.tool_calls
                ],
            }
        )
        for call in completion.tool_calls:
            tool = specs.get(call.name)
            error: str | None = None
            output: object = None
            if tool is None:
                error = f"unknown tool {call.name!r}; the tools are: {', '.join(specs)}"
            else:
                try:
                    args, kw = tool.bind(call.arguments)
                except pydantic.ValidationError as exc:
                    error = f"invalid arguments for {call.name}: {exc}"
                else:
                    outcome = yield Invoke(tool.fn, args, kw)
                    assert isinstance(outcome, Outcome)
                    if outcome.error is not None:
                        if not catch_errors:
                            raise outcome.error
                        error = f"{type(outcome.error).__name__}: {outcome.error}"
                    output = outcome.value
            content = f"error: {error}" if error is not None else _render(output)
            results.append(ToolResult(call, output, content, error))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    raise MaxToolStepsError(
        f"the model still asked for tools after max_steps={max_steps} calls; "
        "raise max_steps or check the tools' answers (messages are on the error)",
        messages=messages,
        steps=max_steps,
    )


def drive(flow: ToolFlow, execute: Callable[[Ask | Invoke], object]) -> ToolRun:
    """Run a tool flow with blocking calls: ``execute`` answers each step."""
    try:
        step = next(flow)
        while True:
            step = flow.send(execute(step))
    except StopIteration as stop:
        result: ToolRun = stop.value
        return result


async def adrive(flow: ToolFlow, execute: Callable[[Ask | Invoke], Awaitable[object]]) -> ToolRun:
    """Run a tool flow with awaited calls: ``execute`` answers each step."""
    try:
        step = next(flow)
        while True:
            step = flow.send(await execute(step))
    except StopIteration as stop:
        result: ToolRun = stop.value
        return result


def run_tools(
    model: _CompletingModel,
    prompt: object,
    tools: Sequence[Callable[..., object]],
    *,
    max_steps: int = 5,
    catch_errors: bool = False,
    **kwargs: Any,
) -> ToolRun:
    """Let the model call Python functions until it answers.

    Each step calls ``model.complete(Chat(messages), tools=[tool_schema(f) ...], **kwargs)``; the
    calls it asks for are validated against the functions' signatures, run, and fed back as
    ``role: tool`` messages. Unknown tools and invalid arguments are reported to the model.
    A ``tool_choice`` in ``kwargs`` applies to the first step only.

    Args:
        model: A model with ``complete(messages, **kw) -> Completion``.
        prompt: A string, a list of OpenAI message dicts, or a ``Chat``.
        tools: The functions the model may call.
        max_steps: The most model calls.
        catch_errors: Report an exception raised by a tool to the model instead of raising.
        **kwargs: Passed to every ``model.complete`` call.

    Returns:
        The final answer with the conversation and every executed call.

    Raises:
        MaxToolStepsError: the model still asked for tools after ``max_steps`` calls.
    """

    def execute(step: Ask | Invoke) -> object:
        if isinstance(step, Ask):
            return model.complete(Chat(step.messages), **step.kwargs)
        try:
            value = step.fn(*step.args, **step.kwargs)
        except Exception as exc:
            return Outcome(error=exc)
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            raise TypeError(
                f"tool {getattr(step.fn, '__name__', step.fn)!r} is async; use arun_tools"
            )
        return Outcome(value)

    return drive(tool_flow(prompt, tools, max_steps, catch_errors, kwargs), execute)


async def arun_tools(
    model: _AsyncCompletingModel,
    prompt: object,
    tools: Sequence[Callable[..., object]],
    *,
    max_steps: int = 5,
    catch_errors: bool = False,
    **kwargs: Any,
) -> ToolRun:
    """Async twin of :func:`run_tools`; tools may be ``async def`` or plain functions."""

    async def execute(step: Ask | Invoke) -> object:
        if isinstance(step, Ask):
            return await model.complete(Chat(step.messages), **step.kwargs)
        try:
            value = step.fn(*step.args, **step.kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            return Outcome(error=exc)
        return Outcome(value)

    return await adrive(tool_flow(prompt, tools, max_steps, catch_errors, kwargs), execute)
