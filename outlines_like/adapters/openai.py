"""OpenAI: strict ``response_format`` json_schema (rewritten for strict mode) and json_object.

OpenAI enforces a subset of JSON Schema and nothing else: regex and grammars raise
``UnsupportedConstraintError`` before any request goes out, and so does a schema strict mode
cannot express (the message names the keyword and where it is).
"""

from __future__ import annotations

import dataclasses

from outlines_like.adapters._common import BaseAdapter, unsupported
from outlines_like.adapters._schema import schema_name, to_openai_strict
from outlines_like.adapters.base import ConstraintFields, Endpoint, ServerKind
from outlines_like.types import JsonObject, JsonSchema

__all__ = ["OpenAIAdapter"]


@dataclasses.dataclass(frozen=True)
class OpenAIAdapter(BaseAdapter):
    """The OpenAI API dialect (api.openai.com, Azure OpenAI)."""

    kind: ServerKind = dataclasses.field(default="openai", init=False)

    def json_schema(self, term: JsonSchema, endpoint: Endpoint) -> ConstraintFields:
        """``response_format`` json_schema, strict, with the schema made valid for strict mode."""
        self._chat_only(endpoint, "a JSON Schema")
        schema = to_openai_strict(term.schema)
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
                "OpenAI's legacy completions endpoint takes no response_format; use chat",
            )
