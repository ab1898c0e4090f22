"""llama.cpp's ``llama-server``: ``grammar`` (GBNF) and ``json_schema`` in the body.

The server ignores ``response_format`` on ``/v1/completions`` (HTTP 200, no constraint), so
schemas always go as the top-level ``json_schema`` field, which both endpoints read. On
``/v1/completions`` that field is compiled by LLGuidance with flexible whitespace; the compact
default asks for ``x-guidance: {"whitespace_flexible": false}`` inside the schema.

llama.cpp's JSON Schema converter drops what it does not know without a word (``number``
bounds, ``multipleOf``, ``minProperties``, unanchored ``pattern``...: see
``adapters/capabilities.py``). A schema that uses any of those is compiled here, by our own
JSON Schema compiler, into GBNF and sent as ``grammar``; when our compiler cannot carry it
either, the request is refused before it goes out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from outlines_like.adapters._common import BaseAdapter, grammars
from outlines_like.adapters.base import ConstraintFields, Endpoint, ServerKind
from outlines_like.adapters.capabilities import LLAMACPP_JSON_SCHEMA, Support
from outlines_like.types import CFG, JsonObject, JsonSchema, Term

__all__ = ["LlamaCppAdapter"]


@dataclasses.dataclass(frozen=True)
class LlamaCppAdapter(BaseAdapter):
    """The llama.cpp server dialect."""

    kind: ServerKind = dataclasses.field(default="llamacpp", init=False)
    schema_engine: ClassVar[Mapping[str, Support] | None] = LLAMACPP_JSON_SCHEMA

    def regex(self, pattern: str, term: Term, endpoint: Endpoint) -> ConstraintFields:
        """``grammar``: the regex converted to GBNF."""
        gbnf = self.convert(endpoint, "the regex as GBNF", grammars().regex_to_gbnf, pattern)
        return {"extra_body": {"grammar": gbnf}}

    def json_schema(self, term: JsonSchema, endpoint: Endpoint) -> ConstraintFields:
        """``json_schema``; compact whitespace asked of LLGuidance on completions.

        Schemas with keywords llama.cpp would drop never reach here: ``BaseAdapter`` sends
        them as our compiled regex, i.e. as GBNF ``grammar``.
        """
        schema = term.schema
        if endpoint == "completions" and term.whitespace_pattern is None:
            schema = {"x-guidance": {"whitespace_flexible": False}, **schema}
        return {"extra_body": {"json_schema": schema}}

    def json_object(self, term: JsonObject, endpoint: Endpoint) -> ConstraintFields:
        """``response_format`` json_object on chat; an object ``json_schema`` on completions."""
        if endpoint == "completions":
            return {"extra_body": {"json_schema": {"type": "object"}}}
        return {"response_format": {"type": "json_object"}}

    def grammar(self, term: CFG, endpoint: Endpoint) -> ConstraintFields:
        """``grammar``: GBNF, converted from Lark or normalised from xgrammar-style EBNF.

        llama.cpp's reader is stricter than xgrammar's (rule names without ``_``, a rule
        ends at a newline), so EBNF is rewritten rather than sent as given.
        """
        text = term.definition
        if term.syntax == "lark":
            text = self.convert(endpoint, "the Lark grammar as GBNF", grammars().lark_to_gbnf, text)
        else:
            text = self.convert(endpoint, "the grammar as GBNF", grammars().ebnf_to_gbnf, text)
        return {"extra_body": {"grammar": text}}
