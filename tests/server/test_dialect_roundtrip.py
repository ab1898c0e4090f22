"""Every adapter's request fields, read back by the reference server, mean the same term.

The reference server reads every dialect the adapters write (vLLM new and old, SGLang,
llama.cpp): nothing an adapter sends may be dropped on the way (``whitespace_pattern`` was).
Terms are compared by meaning: grammars are converted on the way (Lark -> EBNF), schemas are
closed (``additionalProperties: false``), so texts must fit both or neither.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from outlines_like.adapters import get_adapter_for
from outlines_like.server.dialects import read_constraint
from outlines_like.types import CFG, Choice, JsonObject, JsonSchema, Regex, Term, to_regex
from outlines_like.types.verify import violation

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "s": {"type": "string", "maxLength": 3}},
    "required": ["n", "s"],
    "additionalProperties": False,
}
CASES: list[tuple[str, Term, list[str]]] = [
    ("regex", Regex(r"[a-z]{2}-[0-9]"), ["ab-1", "ab-12", "AB-1"]),
    ("choice", Choice(("red", "green")), ["red", "green", "blue"]),
    ("schema", JsonSchema(SCHEMA), ['{"n":1,"s":"ab"}', '{"n": 1, "s": "ab"}', '{"n":1}']),
    (
        "schema-ws",
        JsonSchema(SCHEMA, whitespace_pattern=r"[ ]?"),
        ['{"n": 1, "s": "ab"}', '{"n":1,"s":"ab"}', '{"n":  1,"s":"ab"}'],
    ),
    ("object", JsonObject(), ['{"a":[1]}', "[1]"]),
    ("lark", CFG('start: "yes" | "no" NUMBER\nNUMBER: /[0-9]+/'), ["yes", "no12", "maybe"]),
    ("ebnf", CFG('root ::= "n=" [0-9] [0-9]?'), ["n=1", "n=12", "n=123"]),
]
DIALECTS = [("vllm", None), ("vllm", "0.8.5"), ("sglang", None), ("llamacpp", None)]


def _body(fields: Any) -> dict[str, Any]:
    body = dict(fields.get("extra_body", {}))
    if "response_format" in fields:
        body["response_format"] = fields["response_format"]
    return body


@pytest.mark.parametrize(("kind", "version"), DIALECTS)
@pytest.mark.parametrize(("name", "term", "texts"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_what_an_adapter_sends_reads_back_as_the_same_term(
    kind: str, version: str | None, name: str, term: Term, texts: list[str], endpoint: str
) -> None:
    adapter = get_adapter_for(kind, version)
    fields = adapter.constraint_fields(term, endpoint=endpoint)  # type: ignore[arg-type]
    spec = read_constraint(_body(fields))
    assert spec is not None, fields
    read = spec.term
    if isinstance(term, JsonSchema) and isinstance(read, JsonSchema):
        assert read.whitespace_pattern == term.whitespace_pattern, (kind, fields)
    for text in texts:
        assert _fits(read, text) == _fits(term, text), (kind, text)


def _fits(term: Term, text: str) -> bool:
    """Whether ``text`` is in the term's language (a schema's as our regex path reads it,
    whitespace included)."""
    if isinstance(term, JsonSchema):
        return re.fullmatch(to_regex(term), text) is not None
    return violation(term, text) is None


@pytest.mark.parametrize(("kind", "version"), [("vllm", None), ("vllm", "0.8.5"), ("sglang", None)])
def test_lenient_travels_to_the_reference_server(kind: str, version: str | None) -> None:
    """JsonSchema(..., lenient=True) means the same on the server: it compiles leniently."""
    import warnings

    from outlines_like.adapters.base import LENIENT_MARK
    from outlines_like.errors import UnenforcedKeywordWarning

    term = JsonSchema({"type": "integer", "multipleOf": 7, "minimum": 0}, lenient=True)
    fields = get_adapter_for(kind, version).constraint_fields(term, endpoint="chat")
    assert LENIENT_MARK in str(fields)
    spec = read_constraint(_body(fields))
    assert spec is not None
    read = spec.term
    assert isinstance(read, JsonSchema)
    assert read.lenient
    assert LENIENT_MARK not in read.schema
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnenforcedKeywordWarning)
        assert re.fullmatch(to_regex(read), "12")  # compiles (multipleOf left to the check)
