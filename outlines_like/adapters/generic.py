"""Any other OpenAI-compatible server: JSON Schema and JSON objects through ``response_format``.

Nothing else is assumed. Regex, grammars and the completions endpoint raise
``UnsupportedConstraintError`` rather than send fields an unknown server may silently drop;
name the server (``server="vllm"``...) when it is one we know.
"""

from __future__ import annotations

import dataclasses

from outlines_like.adapters._common import BaseAdapter, unsupported
from outlines_like.adapters._schema import schema_name
from outlines_like.adapters.base import ConstraintFields, Endpoint, ServerKind
from outlines_like.types import JsonObject, JsonSchema

__all__ = ["GenericAdapter"]


@dataclasses.dataclass(frozen=True)
class GenericAdapter(BaseAdapter):
    """A plain OpenAI-compatible server."""

    kind: ServerKind = dataclasses.field(default="generic", init=False)

    def json_schema(self, term: JsonSchema, endpoint: Endpoint) -> ConstraintFields:
        """``response_format`` json_schema (strict), the schema as given."""
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
                "an unknown OpenAI-compatible server has no known constraint field on "
                "/v1/completions; use the chat endpoint, or name the server (server='vllm', "
                "'sglang', 'llamacpp')",
            )
