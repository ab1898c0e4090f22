"""Ollama: ``response_format`` json_schema and json_object on ``/v1/chat/completions``.

Ollama's OpenAI route turns ``response_format`` into its native ``format`` (JSON Schema,
enforced by llama.cpp's grammar sampler since Ollama 0.5). It has no regex or grammar field,
and its ``/v1/completions`` takes no ``response_format``.
"""

from __future__ import annotations

import dataclasses

from outlines_like.adapters._common import BaseAdapter, unsupported
from outlines_like.adapters._schema import schema_name
from outlines_like.adapters.base import ConstraintFields, Endpoint, ServerKind
from outlines_like.types import JsonObject, JsonSchema

__all__ = ["OllamaAdapter"]


@dataclasses.dataclass(frozen=True)
class OllamaAdapter(BaseAdapter):
    """The Ollama dialect (OpenAI-compatible routes, Ollama >= 0.5)."""

    kind: ServerKind = dataclasses.field(default="ollama", init=False)

    def json_schema(self, term: JsonSchema, endpoint: Endpoint) -> ConstraintFields:
        """``response_format`` json_schema (Ollama reads only ``schema``)."""
        self._chat_only(endpoint, "a JSON Schema")
        schema = term.schema
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": schema_name(schema), "schema": schema, "strict": True},
            }
        }

    def json_object(self, term: JsonObject, endpoint: Endpoint) -> ConstraintFields:
        """``response_format`` json_object."""
        self._chat_only(endpoint, "'any JSON object' (the dict output type)")
        return {"response_format": {"type": "json_object"}}

    def _chat_only(self, endpoint: Endpoint, what: str) -> None:
        if endpoint != "chat":
            raise unsupported(
                self._label(endpoint),
                what,
                "Ollama's /v1/completions takes no response_format; use the chat endpoint",
            )
