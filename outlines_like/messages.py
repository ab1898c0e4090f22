"""The message layer: what a model answered (``Completion``, ``Usage``, ``ToolCall``), read once.

Every module that reads a server's answer (``models``, ``streaming``, ``tools``,
``reasoning``) takes these types and helpers from here; this module imports nothing of ours
but ``errors``, so it sits at the bottom of the package and no import cycle can run through it.

- :class:`Usage`, :class:`Completion`, :class:`ToolCall`: the results; :class:`Attempt`: one
  answer of a reasked call (``models/reask.py``).
- :func:`read_field`: one field of an SDK object or a dict (extras included), read fast.
- :func:`read_usage`: a usage object (or a response or chunk carrying one) as :class:`Usage`.
- :data:`REASONING_FIELDS`: the message fields that hold reasoning, in reading order.
- :func:`new_call_id`: the id given to a tool call the server sent without one.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from outlines_like.errors import ParseError

__all__ = [
    "REASONING_FIELDS",
    "Attempt",
    "Completion",
    "ToolCall",
    "Usage",
    "new_call_id",
    "read_field",
    "read_usage",
]

REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")
"""Message (and delta) fields that hold reasoning, in the order they are read:
``reasoning_content`` (SGLang, llama.cpp, older vLLM, DeepSeek), ``reasoning`` (vLLM >= 0.11,
Ollama's ``/v1``), ``thinking`` (Ollama's native API)."""


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """A call the model asked for: ``name(**arguments)``."""

    id: str
    name: str
    arguments: dict[str, Any]


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
        attempts: With ``model.complete(..., retries=N)``: every answer of the call, this
            one last (see ``outlines_like.models.reask``); empty otherwise.
    """

    text: str
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None
    raw: object = dataclasses.field(default=None, repr=False, compare=False)
    attempts: tuple[Attempt, ...] = dataclasses.field(default=(), repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One answer of a reasked call (``model.parse(..., retries=N)``), kept whatever came of it.

    Attributes:
        completion: The answer as read (text, reasoning, finish reason, usage).
        error: Why it failed validation (the ``ParseError``); ``None`` for the answer kept.
        feedback: The message that asked the model again after this answer; ``None`` when
            it was not asked again.
    """

    completion: Completion
    error: ParseError | None = None
    feedback: str | None = None

    @property
    def text(self) -> str:
        """The answer's text."""
        return self.completion.text

    @property
    def usage(self) -> Usage | None:
        """The token counts of the request that produced this answer."""
        return self.completion.usage


def read_field(obj: object, name: str) -> Any:
    """Read ``name`` from a dict or an SDK object (pydantic extra fields included).

    ``None`` when absent. Looks in a pydantic object's ``__dict__`` and extras first: a
    missing attribute makes pydantic raise and catch an ``AttributeError``, which costs
    microseconds per field, and this runs for every field of every chunk.
    """
    if type(obj) is dict:
        return obj.get(name)
    attrs = getattr(obj, "__dict__", None)
    if attrs is not None and name in attrs:
        value = attrs[name]
        if value is not None:
            return value
    extra = getattr(obj, "__pydantic_extra__", None)
    if type(extra) is dict:  # a pydantic object: not a field, so an extra or nothing
        return extra.get(name)
    if isinstance(obj, Mapping):  # after the fast paths: an ABC check is slow
        return obj.get(name)
    if attrs is not None and name in attrs:
        return None
    return getattr(obj, name, None)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_usage(obj: object) -> Usage | None:
    """Read token counts into :class:`Usage`; ``None`` when the server sent none.

    Args:
        obj: A usage object (SDK or dict), or a response or chunk that carries one under
            ``usage`` (read when ``obj`` holds no token count of its own).

    A count that is missing or not an integer reads as 0; ``total_tokens`` is computed when
    missing or 0; ``reasoning_tokens`` comes from ``completion_tokens_details`` or, failing
    that, a top-level ``reasoning_tokens`` (Ollama), and stays ``None`` when neither is sent.
    """
    if obj is None:
        return None
    raw_prompt = read_field(obj, "prompt_tokens")
    raw_completion = read_field(obj, "completion_tokens")
    if raw_prompt is None and raw_completion is None and read_field(obj, "total_tokens") is None:
        nested = read_field(obj, "usage")
        if nested is not None or read_field(obj, "choices") is not None:
            return read_usage(nested)
    prompt = _count(raw_prompt) or 0
    completion = _count(raw_completion) or 0
    total = _count(read_field(obj, "total_tokens")) or prompt + completion
    details = read_field(obj, "completion_tokens_details")
    reasoning = _count(read_field(details, "reasoning_tokens")) if details is not None else None
    if reasoning is None:
        reasoning = _count(read_field(obj, "reasoning_tokens"))
    return Usage(prompt, completion, total, reasoning)


def new_call_id(index: int) -> str:
    """A fresh id for the ``index``-th tool call of an answer that carried no id."""
    return f"call_{uuid.uuid4().hex[:24]}"
