"""SGLang: ``regex`` and ``ebnf`` in the body, JSON Schema through ``response_format``.

SGLang reads one constraint per request: ``regex``, ``ebnf`` (xgrammar's GBNF dialect) or
``json_schema`` (a JSON string, on ``/v1/completions``), or an OpenAI ``response_format``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import ClassVar

from outlines_like.adapters._common import BaseAdapter, grammars
from outlines_like.adapters._schema import close_objects, schema_name
from outlines_like.adapters.base import ConstraintFields, Endpoint, ServerKind
from outlines_like.adapters.capabilities import XGRAMMAR_JSON_SCHEMA, Support
from outlines_like.types import CFG, JsonObject, JsonSchema, Term

__all__ = ["SGLangAdapter"]


@dataclasses.dataclass(frozen=True)
class SGLangAdapter(BaseAdapter):
    """The SGLang dialect (any version with ``regex``/``ebnf``/``response_format``)."""

    kind: ServerKind = dataclasses.field(default="sglang", init=False)
    schema_engine: ClassVar[Mapping[str, Support] | None] = XGRAMMAR_JSON_SCHEMA

    def regex(self, pattern: str, term: Term, endpoint: Endpoint) -> ConstraintFields:
        """``extra_body.regex``."""
        return {"extra_body": {"regex": pattern}}

    def json_schema(self, term: JsonSchema, endpoint: Endpoint) -> ConstraintFields:
        """Strict ``response_format`` json_schema on chat, ``json_schema`` text on completions."""
        schema = close_objects(term.schema)
        if endpoint == "completions":
            return {"extra_body": {"json_schema": json.dumps(schema)}}
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": schema_name(schema), "schema": schema, "strict": True},
            }
        }

    def json_object(self, term: JsonObject, endpoint: Endpoint) -> ConstraintFields:
        """``response_format`` json_object on chat; an object schema on completions."""
        if endpoint == "completions":
            return {"extra_body": {"json_schema": json.dumps({"type": "object"})}}
        return {"response_format": {"type": "json_object"}}

    def grammar(self, term: CFG, endpoint: Endpoint) -> ConstraintFields:
        """``extra_body.ebnf`` in xgrammar's dialect: Lark converted, GBNF spelled out."""
        if term.syntax == "lark":
            convert, what = grammars().lark_to_ebnf, "the Lark grammar as EBNF"
        else:  # xgrammar reads most GBNF, not all ('.', some escapes): spell those out
            convert, what = grammars().gbnf_to_ebnf, "the grammar in xgrammar's EBNF"
        return {"extra_body": {"ebnf": self.convert(endpoint, what, convert, term.definition)}}
