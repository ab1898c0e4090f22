"""What every server adapter is: a pure function from a term to request fields.

An adapter never performs I/O. It takes the term an output type became and returns the
fields to merge into the request: ``response_format`` (a top-level OpenAI parameter) and
``extra_body`` (server-specific keys sent alongside). Unsupported combinations raise
``UnsupportedConstraintError`` naming the server and what would work instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Protocol

from typing_extensions import Required, TypedDict

from outlines_like.types import Term

__all__ = [
    "LENIENT_MARK",
    "Adapter",
    "ConstraintFields",
    "Endpoint",
    "JsonSchemaSpec",
    "ResponseFormat",
    "ResponseFormatJsonObject",
    "ResponseFormatJsonSchema",
    "ServerInfo",
    "ServerKind",
]

LENIENT_MARK = "x-outlines-like-lenient"
"""Schema annotation saying the schema was made with ``JsonSchema(..., lenient=True)``: other
engines ignore ``x-`` keywords, and our reference server then compiles it leniently too."""

ServerKind = Literal["sglang", "vllm", "llamacpp", "tgi", "ollama", "openai", "generic"]
"""The dialects we know; ``generic`` is any other OpenAI-compatible server."""

Endpoint = Literal["chat", "completions"]


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    """What a server said it is."""

    kind: ServerKind
    version: str | None = None
    model_ids: tuple[str, ...] = ()


class JsonSchemaSpec(TypedDict, total=False):
    """The ``json_schema`` member of an OpenAI ``response_format``."""

    name: Required[str]
    schema: Required[dict[str, Any]]
    strict: bool
    description: str


class ResponseFormatJsonSchema(TypedDict):
    """``response_format`` asking for JSON under a schema."""

    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


class ResponseFormatJsonObject(TypedDict, total=False):
    """``response_format`` asking for any JSON object (some servers take a ``schema`` too)."""

    type: Required[Literal["json_object"]]
    schema: dict[str, Any]


ResponseFormat = ResponseFormatJsonSchema | ResponseFormatJsonObject


class ConstraintFields(TypedDict, total=False):
    """Fields an adapter adds to a request."""

    response_format: ResponseFormat
    extra_body: dict[str, Any]


class Adapter(Protocol):
    """One server dialect."""

    @property
    def kind(self) -> ServerKind:
        """The dialect's name."""
        ...

    def constraint_fields(self, term: Term | None, *, endpoint: Endpoint) -> ConstraintFields:
        """Return the request fields that make the server enforce ``term``.

        ``term`` is ``None`` for free text (then no fields). ``endpoint`` is ``"chat"``
        for ``/v1/chat/completions`` and ``"completions"`` for ``/v1/completions``.
        """
        ...
