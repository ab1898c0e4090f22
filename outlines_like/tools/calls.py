"""Tool calls read from a server's answer: OpenAI ``tool_calls`` and ``<tool_call>`` text.

- :func:`tool_calls_from_message` reads OpenAI ``tool_calls`` (SDK objects or dicts, arguments
  as a JSON string or, as TGI sends them, a dict).
- :func:`parse_tool_calls` reads Hermes/Qwen ``<tool_call>{json}</tool_call>`` blocks from text.

Malformed ``<tool_call>`` JSON is not dropped: by default the block stays in the remaining
text and a :class:`~outlines_like.errors.ToolCallParseWarning` says why; with ``strict=True``
a ``ParseError`` is raised instead.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from outlines_like.errors import ParseError, ProviderResponseError, ToolCallParseWarning
from outlines_like.messages import ToolCall, new_call_id, read_field

__all__ = [
    "TOOL_CALL_END",
    "TOOL_CALL_START",
    "call_from_body",
    "decode_arguments",
    "parse_tool_calls",
    "tool_calls_from_message",
]


def decode_arguments(arguments: object, *, tool: str = "?") -> dict[str, Any]:
    """Turn a tool call's ``arguments`` (a JSON string, a dict, or empty) into a dict.

    Raises:
        ParseError: the string is not JSON, or not a JSON object.
    """
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not isinstance(arguments, str):
        raise ParseError(
            f"arguments of tool call {tool!r} should be a JSON string or an object, "
            f"got {type(arguments).__name__}",
            text=repr(arguments),
        )
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ParseError(
            f"arguments of tool call {tool!r} are not valid JSON ({exc.msg} at {exc.pos}): "
            f"{arguments[:200]!r}",
            text=arguments,
        ) from exc
    if not isinstance(value, dict):
        raise ParseError(
            f"arguments of tool call {tool!r} should be a JSON object, got {arguments[:200]!r}",
            text=arguments,
        )
    return value


def tool_calls_from_message(
    message: object, *, id_factory: Callable[[int], str] = new_call_id
) -> list[ToolCall]:
    """Read the OpenAI ``tool_calls`` of a message (SDK object or dict).

    Handles arguments as a JSON string (OpenAI, vLLM, SGLang, llama.cpp) or as an object
    (TGI, Ollama's native API), a missing ``id`` (made with ``id_factory``), a single call
    sent as an object instead of a list, and the legacy ``function_call`` field.

    Raises:
        ParseError: a call's arguments are not a JSON object.
        ProviderResponseError: a call has no function name.
    """
    raw = read_field(message, "tool_calls")
    if raw is None:
        legacy = read_field(message, "function_call")
        raw = [{"function": legacy}] if legacy else []
    if isinstance(raw, Mapping):
        raw = [raw]
    calls: list[ToolCall] = []
    for i, item in enumerate(raw):
        function = read_field(item, "function") or item
        name = read_field(function, "name")
        if not isinstance(name, str) or not name:
            raise ProviderResponseError(f"tool call #{i} has no function name: {item!r:.200}")
        args = read_field(function, "arguments")
        if args is None:
            args = read_field(function, "parameters")
        call_id = read_field(item, "id")
        calls.append(
            ToolCall(
                id=call_id if isinstance(call_id, str) and call_id else id_factory(i),
                name=name,
                arguments=decode_arguments(args, tool=name),
            )
        )
    return calls


TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
_BLOCK = re.compile(
    re.escape(TOOL_CALL_START) + r"(.*?)(?:" + re.escape(TOOL_CALL_END) + r"|\Z)", re.S
)


def call_from_body(body: str, index: int, id_factory: Callable[[int], str]) -> ToolCall:
    """Read one block's ``{"name": ..., "arguments": {...}}``; ``ValueError`` says what is wrong."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at {exc.pos})") from exc
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("no 'name' string")
    args = value.get("arguments", value.get("parameters"))
    if isinstance(args, str):  # some templates double-encode
        try:
            args = json.loads(args)
        except json.JSONDecodeError as exc:
            raise ValueError(f"'arguments' is a string that is not JSON ({exc.msg})") from exc
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ValueError("'arguments' is not a JSON object")
    return ToolCall(id=id_factory(index), name=name, arguments=args)


def parse_tool_calls(
    text: str,
    *,
    strict: bool = False,
    id_factory: Callable[[int], str] = new_call_id,
) -> tuple[list[ToolCall], str]:
    """Read Hermes/Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks.

    Blanks around the JSON and between blocks are allowed, ``"parameters"`` is read as
    ``"arguments"``, and a last block cut before its ``</tool_call>`` is read when its JSON is
    complete.

    Args:
        text: The model's text.
        strict: Raise on a malformed block instead of warning.
        id_factory: Makes the id of the n-th call (the text carries none).

    Returns:
        The calls, and the text left once the blocks are removed (stripped). A malformed block
        stays in that text.

    Raises:
        ParseError: with ``strict=True``, a block is not a JSON object with a ``name``.
    """
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = 0
    for match in _BLOCK.finditer(text):
        kept.append(text[pos : match.start()])
        pos = match.end()
        body = match.group(1).strip()
        try:
            calls.append(call_from_body(body, len(calls), id_factory))
        except ValueError as exc:
            message = (
                f"tool call block at character {match.start()} is unreadable: {exc}: {body[:200]!r}"
            )
            if strict:
                raise ParseError(message, text=text) from exc
            warnings.warn(message + "; it was left in the text", ToolCallParseWarning, stacklevel=2)
            kept.append(match.group(0))
    kept.append(text[pos:])
    if not calls:
        return [], text
    return calls, "".join(kept).strip()
