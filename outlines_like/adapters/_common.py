"""What every adapter shares: dispatch on the kind of term, caching, and the error messages."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from outlines_like.adapters._schema import schema_name
from outlines_like.adapters.base import LENIENT_MARK, ConstraintFields, Endpoint, ServerKind
from outlines_like.adapters.capabilities import KeywordUse, Support, unenforced
from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.telemetry import LOGGERS
from outlines_like.types import (
    CFG,
    Alternatives,
    Choice,
    JsonObject,
    JsonSchema,
    Regex,
    Repeat,
    Sequence,
    String,
    Term,
    to_regex,
)

__all__ = [
    "DISPLAY_NAMES",
    "GRAMMAR_SERVERS",
    "REGEX_SERVERS",
    "BaseAdapter",
    "ResponseFormatAdapter",
    "grammars",
    "unsupported",
]

REGEX_SERVERS = "sglang, vllm, llamacpp, tgi (chat)"
GRAMMAR_SERVERS = "sglang, vllm, llamacpp"
DISPLAY_NAMES: dict[str, str] = {
    "sglang": "SGLang",
    "vllm": "vLLM",
    "llamacpp": "llama.cpp's server",
    "openai": "OpenAI",
    "tgi": "TGI",
    "ollama": "Ollama",
    "generic": "an OpenAI-compatible server of unknown kind",
}
_REGEX_TERMS = (Regex, String, Choice, Sequence, Alternatives, Repeat)
_ENDPOINTS = ("chat", "completions")


def unsupported(server: str, what: str, instead: str) -> UnsupportedConstraintError:
    """Build the error for a constraint ``server`` cannot enforce, saying what would work."""
    return UnsupportedConstraintError(f"{server} cannot enforce {what}; {instead}")


class BaseAdapter:
    """Dispatch a term to ``regex`` / ``json_schema`` / ``json_object`` / ``grammar`` methods.

    Subclasses override the methods for what their server takes; the defaults raise
    ``UnsupportedConstraintError``. Results are cached per (adapter, term, endpoint): each call
    returns fresh top-level dicts, but nested values (schemas) are shared and must be treated
    as read-only.
    """

    kind: ServerKind
    schema_engine: ClassVar[Mapping[str, Support] | None] = None
    """What the server's own JSON Schema engine enforces (``adapters/capabilities.py``);
    ``None`` when it enforces or refuses every keyword (or we do not know it to drop any)."""
    takes_whitespace_pattern: ClassVar[bool] = False
    """Whether the server's schema field carries a ``whitespace_pattern`` (vLLM's does)."""
    marks_lenient: ClassVar[bool] = True
    """Whether a lenient schema is sent with ``LENIENT_MARK`` (an ``x-`` annotation other
    engines ignore), so that our reference server compiles it leniently too."""

    # --- what subclasses override -------------------------------------------------------
    def regex(self, pattern: str, term: Term, endpoint: Endpoint) -> ConstraintFields:
        """Fields for text matching ``pattern`` (``term`` is the regex-shaped term)."""
        raise unsupported(
            self._label(endpoint),
            f"a regular expression (from {_term_label(term)})",
            "wrap the value in a JSON Schema output type (a pydantic model, dataclass or "
            f"TypedDict with one field), or use a server that takes regex: {REGEX_SERVERS}",
        )

    def json_schema(self, term: JsonSchema, endpoint: Endpoint) -> ConstraintFields:
        """Fields for JSON valid under ``term.schema``."""
        raise unsupported(
            self._label(endpoint),
            "a JSON Schema",
            "use the chat endpoint, or a server that takes JSON Schema there: sglang, vllm, "
            "llamacpp",
        )

    def json_object(self, term: JsonObject, endpoint: Endpoint) -> ConstraintFields:
        """Fields for any JSON object."""
        raise unsupported(
            self._label(endpoint),
            "'any JSON object' (the dict output type)",
            "use the chat endpoint, or a server that takes it there: sglang, vllm, llamacpp",
        )

    def grammar(self, term: CFG, endpoint: Endpoint) -> ConstraintFields:
        """Fields for text in the context-free grammar ``term``."""
        raise unsupported(
            self._label(endpoint),
            "a context-free grammar (CFG)",
            f"use a server that takes grammars: {GRAMMAR_SERVERS}; or a regex / JSON Schema "
            "output type when the language allows it",
        )

    # --- the protocol ----------------------------------------------------------------------
    def constraint_fields(self, term: Term | None, *, endpoint: Endpoint) -> ConstraintFields:
        """Return the request fields that make the server enforce ``term``.

        Raises:
            UnsupportedConstraintError: this server cannot enforce ``term`` on ``endpoint``.
            InvalidConstraintError: the term's regex, schema or grammar is wrong.
        """
        if term is None:
            return {}
        if endpoint not in _ENDPOINTS:
            raise ValueError(f"endpoint must be 'chat' or 'completions', got {endpoint!r}")
        cached = self._cached_fields(term, endpoint)
        return _fresh(cached)

    @functools.lru_cache(maxsize=1024)  # noqa: B019 - adapters are few, frozen and hashable
    def _cached_fields(self, term: Term, endpoint: Endpoint) -> ConstraintFields:
        if isinstance(term, _REGEX_TERMS):
            return self.regex(to_regex(term), term, endpoint)
        if isinstance(term, JsonSchema):
            dropped = self.dropped_keywords(term)
            if dropped:
                return self._compiled_schema(term, endpoint, dropped)
            if term.lenient and self.marks_lenient:
                term = JsonSchema(
                    {**term.schema, LENIENT_MARK: True},
                    whitespace_pattern=term.whitespace_pattern,
                    lenient=True,
                )
            return self.json_schema(term, endpoint)
        if isinstance(term, JsonObject):
            return self.json_object(term, endpoint)
        if isinstance(term, CFG):
            return self.grammar(term, endpoint)
        raise UnsupportedConstraintError(
            f"{self.kind}: no request fields for the term {term!r}; expected a Regex, String, "
            "Choice, Sequence, Alternatives, Repeat, JsonSchema, JsonObject or CFG"
        )

    def dropped_keywords(self, term: JsonSchema) -> list[KeywordUse]:
        """The keyword uses of ``term`` this server's JSON Schema engine would drop.

        With ``lenient=True`` keywords are not listed: the schema then goes natively, and
        answers are checked locally instead. A ``whitespace_pattern`` (ours, not a keyword) is
        listed for servers whose schema field cannot carry it.
        """
        dropped: list[KeywordUse] = []
        if term.whitespace_pattern is not None and not self.takes_whitespace_pattern:
            dropped.append(KeywordUse("#", "whitespace_pattern", term.whitespace_pattern, ()))
        if self.schema_engine is None or term.lenient:
            return dropped
        return dropped + unenforced(self.schema_engine, term.schema)

    def _compiled_schema(
        self, term: JsonSchema, endpoint: Endpoint, dropped: list[KeywordUse]
    ) -> ConstraintFields:
        """The schema as our own compiled regex, in this server's regex or grammar field."""
        names = ", ".join(f"{use.keyword!r} at {use.pointer}" for use in dropped[:5])
        if len(dropped) > 5:
            names += f" (and {len(dropped) - 5} more)"
        label = self._label(endpoint)
        try:
            pattern = to_regex(term)
        except InvalidConstraintError as exc:
            raise UnsupportedConstraintError(
                f"{label} does not enforce {names} (its JSON Schema engine drops them), and our "
                f"compiler cannot enforce them either: {exc}. Use a server whose engine enforces "
                "them, or pass JsonSchema(..., lenient=True) to send the schema as it is and have "
                "each answer checked locally"
            ) from exc
        try:
            fields = self.regex(pattern, term, endpoint)
        except UnsupportedConstraintError as exc:
            raise UnsupportedConstraintError(
                f"{label} does not enforce {names} (its JSON Schema engine drops them) and takes "
                "no regex field for our compiled form. Use a server that takes regex "
                f"({REGEX_SERVERS}), or pass JsonSchema(..., lenient=True) to send the schema as "
                "it is and have each answer checked locally"
            ) from exc
        LOGGERS["adapters"].debug(
            "%s drops %s: the schema goes as our compiled regex (%d characters)",
            label,
            names,
            len(pattern),
            extra={"ol_server_kind": self.kind, "ol_dropped": [u.keyword for u in dropped]},
        )
        return fields

    def convert(
        self, endpoint: Endpoint, what: str, converter: Callable[[str], str], text: str
    ) -> str:
        """Run a grammar converter, saying which server needed it when it fails."""
        try:
            return converter(text)
        except (UnsupportedConstraintError, InvalidConstraintError) as exc:
            raise type(exc)(
                f"{self._label(endpoint)} needs {what}, and the conversion failed: {exc}"
            ) from exc

    def _label(self, endpoint: Endpoint) -> str:
        path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
        return f"{DISPLAY_NAMES[self.kind]} (server '{self.kind}', {path})"


def _term_label(term: Term) -> str:
    if isinstance(term, Regex):
        return "a Regex or a type such as int, float, bool, date"
    if isinstance(term, Choice):
        return "a Literal / Enum / Choice"
    return f"a {type(term).__name__} term"


def _fresh(fields: ConstraintFields) -> ConstraintFields:
    """Copy the top two levels so callers may update the dicts they get."""
    out: ConstraintFields = {}
    if "response_format" in fields:
        out["response_format"] = _copy_format(fields["response_format"])
    if "extra_body" in fields:
        out["extra_body"] = {
            k: (dict(v) if isinstance(v, dict) else v) for k, v in fields["extra_body"].items()
        }
    return out


def _copy_format(fmt: Any) -> Any:
    copied = dict(fmt)
    if isinstance(copied.get("json_schema"), dict):
        copied["json_schema"] = dict(copied["json_schema"])
    return copied


def grammars() -> Any:
    """The grammar converters (``outlines_like.types.grammars``), imported on first use."""
    import importlib

    return importlib.import_module("outlines_like.types.grammars")


@dataclasses.dataclass(frozen=True)
class ResponseFormatAdapter(BaseAdapter):
    """A server that takes constraints only as ``response_format``, on the chat endpoint.

    Subclasses set ``completions_hint`` (what to do instead on ``/v1/completions``) and may
    rewrite the schema in ``prepare_schema``.
    """

    completions_hint: ClassVar[str] = "use the chat endpoint"

    def prepare_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The schema as this server should receive it (as given by default)."""
        return schema

    def json_schema(self, term: JsonSchema, endpoint: Endpoint) -> ConstraintFields:
        """``response_format`` json_schema, strict."""
        self._chat_only(endpoint, "a JSON Schema")
        schema = self.prepare_schema(term.schema)
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
            raise unsupported(self._label(endpoint), what, self.completions_hint)
