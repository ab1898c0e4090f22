"""The rich result of one generation: text, reasoning, tool calls, usage, finish reason."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from outlines_like.tools import ToolCall

__all__ = ["Completion", "Usage"]


@dataclasses.dataclass(frozen=True)
class Usage:
    """Token counts of one request (or, summed, of a model's lifetime)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        reasoning = (
            None
            if self.reasoning_tokens is None and other.reasoning_tokens is None
            else (self.reasoning_tokens or 0) + (other.reasoning_tokens or 0)
        )
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            reasoning,
        )


@dataclasses.dataclass(frozen=True)
class Completion:
    """One choice of a generation, with everything the server said about it.

    Attributes:
        text: The answer, reasoning removed. This is what ``model(...)`` returns.
        reasoning: The reasoning text, when the model produced any.
        tool_calls: Tool calls the model asked for.
        finish_reason: ``"stop"``, ``"length"``, ``"tool_calls"``, ``"content_filter"``...
        usage: Token counts of the whole request (shared by the choices of one request).
        raw: The server's response object (an SDK object or a dict).
    """

    text: str
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None
    raw: object = dataclasses.field(default=None, repr=False, compare=False)
