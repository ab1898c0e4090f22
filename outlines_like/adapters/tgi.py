"""Hugging Face TGI: ``response_format`` of TGI's own shape on ``/v1/chat/completions``.

TGI's chat route reads ``{"type": "json", "value": SCHEMA}`` and ``{"type": "regex",
"value": PATTERN}`` (``json_object`` is an alias of ``json``; the OpenAI-shaped ``json_schema``
came only in 3.2). It goes in ``extra_body`` since the OpenAI SDK does not know that shape.
TGI's ``/v1/completions`` takes no constraint, and TGI has no context-free grammars.
"""

from __future__ import annotations

import dataclasses

from outlines_like.adapters._common import BaseAdapter, unsupported
from outlines_like.adapters.base import ConstraintFields, Endpoint, ServerKind
from outlines_like.types import JsonObject, JsonSchema, Term

__all__ = ["TGIAdapter"]


@dataclasses.dataclass(frozen=True)
class TGIAdapter(BaseAdapter):
    """The TGI dialect (text-generation-inference >= 2.1, chat endpoint)."""

    kind: ServerKind = dataclasses.field(default="tgi", init=False)

    def regex(self, pattern: str, term: Term, endpoint: Endpoint) -> ConstraintFields:
        """``response_format: {"type": "regex", "value": pattern}``."""
        self._chat_only(endpoint, "a regular expression")
        return {"extra_body": {"response_format": {"type": "regex", "value": pattern}}}

    def json_schema(self, term: JsonSchema, endpoint: Endpoint) -> ConstraintFields:
        """``response_format: {"type": "json", "value": schema}``."""
        self._chat_only(endpoint, "a JSON Schema")
        return {"extra_body": {"response_format": {"type": "json", "value": term.schema}}}

    def json_object(self, term: JsonObject, endpoint: Endpoint) -> ConstraintFields:
        """``response_format: {"type": "json", "value": {"type": "object"}}``."""
        self._chat_only(endpoint, "'any JSON object' (the dict output type)")
        return {"extra_body": {"response_format": {"type": "json", "value": {"type": "object"}}}}

    def _chat_only(self, endpoint: Endpoint, what: str) -> None:
        if endpoint != "chat":
            raise unsupported(
                self._label(endpoint),
                what,
                "TGI's /v1/completions takes no constraint; use the chat endpoint",
            )
