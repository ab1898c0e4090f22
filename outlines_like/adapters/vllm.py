"""vLLM: ``structured_outputs`` (>= 0.12) or the older ``guided_*`` fields, chosen by version.

vLLM 0.12 removed ``guided_json``/``guided_regex``/``guided_choice``/``guided_grammar`` and
answers them with HTTP 200 and no constraint; older servers ignore ``structured_outputs`` the
same way. So the version decides, and an unknown version gets the newest dialect.

``VLLMAdapter(masker="outlines_like")`` sends the constraint to our own logits processor
running inside vLLM (``outlines_like.integrations.vllm``) instead: one JSON text in
``vllm_xargs`` (vLLM's per-request arguments, ``SamplingParams.extra_args``), so our JSON
Schema keywords, Lark grammars and whitespace policy hold on vLLM. The argument format
(:func:`masker_argument`):

* ``{"kind": "regex", "value": PATTERN}`` (also every ``Choice``/``Literal``/``int``...)
* ``{"kind": "json_schema", "value": SCHEMA, "whitespace_pattern": str|null, "lenient": bool}``
* ``{"kind": "json_object"}``
* ``{"kind": "grammar", "value": TEXT, "syntax": "lark"|"ebnf"}``
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from outlines_like.adapters._common import BaseAdapter, grammars
from outlines_like.adapters.base import ConstraintFields, Endpoint, ServerKind
from outlines_like.adapters.capabilities import XGRAMMAR_JSON_SCHEMA, KeywordUse, Support
from outlines_like.types import CFG, Choice, JsonObject, JsonSchema, Term, to_regex

__all__ = [
    "MASKERS",
    "STRUCTURED_OUTPUTS_SINCE",
    "XARGS_KEY",
    "Masker",
    "VLLMAdapter",
    "masker_adapter",
    "masker_argument",
    "parse_version",
]

Masker = Literal["server", "outlines_like"]
"""Who enforces the constraint: vLLM's own backend, or our processor inside vLLM."""

MASKERS: tuple[Masker, ...] = ("server", "outlines_like")

XARGS_KEY = "outlines_like"
"""The ``vllm_xargs`` key that carries our constraint (a JSON text)."""

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
        masker: ``"server"`` (default): vLLM's own structured-outputs backend enforces the
            constraint. ``"outlines_like"``: our logits processor inside vLLM does (the server
            must be started with it: docs/vllm.md); the constraint goes in ``vllm_xargs``.
    """

    version: str | None = None
    masker: Masker = "server"
    kind: ServerKind = dataclasses.field(default="vllm", init=False)
    schema_engine: ClassVar[Mapping[str, Support] | None] = XGRAMMAR_JSON_SCHEMA
    takes_whitespace_pattern: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.masker not in MASKERS:
            raise ValueError(f"masker={self.masker!r}; use one of {list(MASKERS)}")

    @property
    def ours(self) -> bool:
        """Whether our processor inside vLLM enforces the constraint."""
        return self.masker == "outlines_like"

    def dropped_keywords(self, term: JsonSchema) -> list[KeywordUse]:
        """None with our masker (it enforces or refuses every keyword); else xgrammar's gaps."""
        return [] if self.ours else super().dropped_keywords(term)

    @property
    def legacy(self) -> bool:
        """Whether the server predates ``structured_outputs`` (reads ``guided_*``)."""
        parsed = parse_version(self.version)
        return parsed is not None and parsed[:2] < STRUCTURED_OUTPUTS_SINCE

    def regex(self, pattern: str, term: Term, endpoint: Endpoint) -> ConstraintFields:
        """``structured_outputs.regex``, or ``.choice`` for a plain ``Choice``."""
        if self.ours:
            return _xargs({"kind": "regex", "value": pattern})
        if isinstance(term, Choice):
            if self.legacy:
                return {"extra_body": {"guided_choice": list(term.items)}}
            return {"extra_body": {"structured_outputs": {"choice": list(term.items)}}}
        if self.legacy:
            return {"extra_body": {"guided_regex": pattern}}
        return {"extra_body": {"structured_outputs": {"regex": pattern}}}

    def json_schema(self, term: JsonSchema, endpoint: Endpoint) -> ConstraintFields:
        """``structured_outputs.json`` (with ``whitespace_pattern`` when the term sets one)."""
        if self.ours:
            to_regex(term)  # what our masker compiles: a schema it refuses fails before sending
            return _xargs(
                {
                    "kind": "json_schema",
                    "value": term.schema,
                    "whitespace_pattern": term.whitespace_pattern,
                    "lenient": term.lenient,
                }
            )
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
        if self.ours:
            return _xargs({"kind": "json_object"})
        if self.legacy:
            return {"response_format": {"type": "json_object"}}
        return {"extra_body": {"structured_outputs": {"json_object": True}}}

    def grammar(self, term: CFG, endpoint: Endpoint) -> ConstraintFields:
        """``structured_outputs.grammar`` in EBNF: Lark is converted here.

        vLLM reads Lark through xgrammar's own Lark reader, which refuses templates and
        priorities and mishandles ``%ignore`` before the first token; our conversion has none
        of those limits. EBNF/GBNF goes as given.
        """
        if self.ours:  # our masker reads Lark and EBNF as they are
            return _xargs({"kind": "grammar", "value": term.definition, "syntax": term.syntax})
        text = term.definition
        if term.syntax == "lark":
            text = self.convert(endpoint, "the Lark grammar as EBNF", grammars().lark_to_ebnf, text)
        if self.legacy:
            return {"extra_body": {"guided_grammar": text}}
        return {"extra_body": {"structured_outputs": {"grammar": text}}}


def masker_adapter(server: str | None, masker: Masker) -> VLLMAdapter | None:
    """The adapter ``from_server(..., masker=...)`` fixes, or ``None`` to detect as usual.

    Raises:
        ValueError: ``masker`` is unknown, or ``"outlines_like"`` with a server that is not
            vLLM (our processor runs only inside vLLM).
    """
    if masker == "server":
        return None
    if masker not in MASKERS:
        raise ValueError(f"masker={masker!r}; use one of {list(MASKERS)}")
    if server not in (None, "vllm"):
        raise ValueError(
            f"masker={masker!r} runs inside vLLM (outlines_like.integrations.vllm); it cannot "
            f"serve server={server!r}. Use server='vllm', or masker='server'"
        )
    return VLLMAdapter(masker=masker)


def masker_argument(spec: Mapping[str, Any]) -> str:
    """The ``vllm_xargs`` value for one constraint: compact JSON text, keys in a fixed order.

    ``vllm_xargs`` values must be flat (strings, numbers, lists of them), so the nested
    constraint travels as JSON text; the processor caches compiled constraints by this text.
    """
    return json.dumps(dict(spec), ensure_ascii=False, separators=(",", ":"))


def _xargs(spec: Mapping[str, Any]) -> ConstraintFields:
    return {"extra_body": {"vllm_xargs": {XARGS_KEY: masker_argument(spec)}}}
