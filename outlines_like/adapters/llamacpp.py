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

from outlines_like.adapters._common import BaseAdapter, grammars
from outlines_like.adapters.base import ConstraintFields, Endpoint, ServerKind
from outlines_like.adapters.capabilities import LLAMACPP_JSON_SCHEMA, KeywordUse, unenforced
from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.types import CFG, JsonObject, JsonSchema, Term, to_regex

__all__ = ["LlamaCppAdapter"]


@dataclasses.dataclass(frozen=True)
class LlamaCppAdapter(BaseAdapter):
    """The llama.cpp server dialect."""

    kind: ServerKind = dataclasses.field(default="llamacpp", init=False)

    def regex(self, pattern: str, term: Term, endpoint: Endpoint) -> ConstraintFields:
        """``grammar``: the regex converted to GBNF."""
        gbnf = self.convert(endpoint, "the regex as GBNF", grammars().regex_to_gbnf, pattern)
        return {"extra_body": {"grammar": gbnf}}

    def json_schema(self, term: JsonSchema, endpoint: Endpoint) -> ConstraintFields:
        """``json_schema``; compact whitespace asked of LLGuidance on completions.

        A schema with keywords llama.cpp would drop goes as ``grammar``: our compiled form.
        With ``lenient=True`` it goes natively anyway (answers are then checked locally).

        Raises:
            UnsupportedConstraintError: llama.cpp drops a keyword and our compiler cannot
                enforce it either; the message names the keyword and its JSON pointer.
        """
        schema = term.schema
        dropped = unenforced(LLAMACPP_JSON_SCHEMA, schema)
        if dropped and not term.lenient:
            return self._compiled_schema(term, endpoint, dropped)
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

    def _compiled_schema(
        self, term: JsonSchema, endpoint: Endpoint, dropped: list[KeywordUse]
    ) -> ConstraintFields:
        """``grammar``: the schema through our own compiler, as GBNF."""
        names = ", ".join(f"{use.keyword!r} at {use.pointer}" for use in dropped[:5])
        try:
            pattern = to_regex(term)
        except InvalidConstraintError as exc:
            raise UnsupportedConstraintError(
                f"{self._label(endpoint)} does not enforce {names} (its JSON Schema converter "
                f"drops them), and our compiler cannot enforce them either: {exc}. Use a server "
                "whose engine enforces them, or pass JsonSchema(..., lenient=True) to send the "
                "schema as it is and have each answer checked locally"
            ) from exc
        what = f"the schema as GBNF (llama.cpp would drop {names})"
        return {"extra_body": {"grammar": self.convert(endpoint, what, _regex_gbnf, pattern)}}


def _regex_gbnf(pattern: str) -> str:
    return str(grammars().regex_to_gbnf(pattern))
