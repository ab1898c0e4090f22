"""vLLM: ``structured_outputs`` (>= 0.12) or the older ``guided_*`` fields, chosen by version.

vLLM 0.12 removed ``guided_json``/``guided_regex``/``guided_choice``/``guided_grammar`` and
answers them with HTTP 200 and no constraint; older servers ignore ``structured_outputs`` the
same way. So the version decides, and an unknown version gets the newest dialect.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import ClassVar

from outlines_like.adapters._common import BaseAdapter, grammars
from outlines_like.adapters.base import ConstraintFields, Endpoint, ServerKind
from outlines_like.adapters.capabilities import XGRAMMAR_JSON_SCHEMA, Support
from outlines_like.types import CFG, Choice, JsonObject, JsonSchema, Term

__all__ = ["STRUCTURED_OUTPUTS_SINCE", "VLLMAdapter", "parse_version"]

STRUCTURED_OUTPUTS_SINCE = (0, 12)
"""The first vLLM release that reads ``structured_outputs`` (and drops ``guided_*``)."""

_VERSION = re.compile(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_version(version: str | None) -> tuple[int, int, int] | None:
    """Return ``(major, minor, patch)`` from ``"0.11.2"``, ``"0.12.0rc1"``, ``"v0.6.3.post1+cpu"``.

    ``None`` when there is no version or it does not start with a number.
    """
    if not version:
        return None
    match = _VERSION.match(version.strip())
    if match is None:
        return None
    major, minor, patch = (int(g) if g else 0 for g in match.groups())
    return major, minor, patch


@dataclasses.dataclass(frozen=True)
class VLLMAdapter(BaseAdapter):
    """The vLLM dialect.

    Args:
        version: The server's version (``GET /version``); ``None`` means the newest dialect.
    """

    version: str | None = None
    kind: ServerKind = dataclasses.field(default="vllm", init=False)
    schema_engine: ClassVar[Mapping[str, Support] | None] = XGRAMMAR_JSON_SCHEMA

    @property
    def legacy(self) -> bool:
        """Whether the server predates ``structured_outputs`` (reads ``guided_*``)."""
        parsed = parse_version(self.version)
        return parsed is not None and parsed[:2] < STRUCTURED_OUTPUTS_SINCE

    def regex(self, pattern: str, term: Term, endpoint: Endpoint) -> ConstraintFields:
        """``structured_outputs.regex``, or ``.choice`` for a plain ``Choice``."""
        if isinstance(term, Choice):
            if self.legacy:
                return {"extra_body": {"guided_choice": list(term.items)}}
            return {"extra_body": {"structured_outputs": {"choice": list(term.items)}}}
        if self.legacy:
            return {"extra_body": {"guided_regex": pattern}}
        return {"extra_body": {"structured_outputs": {"regex": pattern}}}

    def json_schema(self, term: JsonSchema, endpoint: Endpoint) -> ConstraintFields:
        """``structured_outputs.json`` (with ``whitespace_pattern`` when the term sets one)."""
        schema = term.schema
        if self.legacy:
            body: dict[str, object] = {"guided_json": schema}
            if term.whitespace_pattern is not None:
                body["guided_whitespace_pattern"] = term.whitespace_pattern
            return {"extra_body": body}
        params: dict[str, object] = {"json": schema}
        if term.whitespace_pattern is not None:
            params["whitespace_pattern"] = term.whitespace_pattern
        return {"extra_body": {"structured_outputs": params}}

    def json_object(self, term: JsonObject, endpoint: Endpoint) -> ConstraintFields:
        """``structured_outputs.json_object``; ``response_format`` json_object before 0.12."""
        if self.legacy:
            return {"response_format": {"type": "json_object"}}
        return {"extra_body": {"structured_outputs": {"json_object": True}}}

    def grammar(self, term: CFG, endpoint: Endpoint) -> ConstraintFields:
        """``structured_outputs.grammar`` in EBNF: Lark is converted here.

        vLLM reads Lark through xgrammar's own Lark reader, which refuses templates and
        priorities and mishandles ``%ignore`` before the first token; our conversion has none
        of those limits. EBNF/GBNF goes as given.
        """
        text = term.definition
        if term.syntax == "lark":
            text = self.convert(endpoint, "the Lark grammar as EBNF", grammars().lark_to_ebnf, text)
        if self.legacy:
            return {"extra_body": {"guided_grammar": text}}
        return {"extra_body": {"structured_outputs": {"grammar": text}}}
