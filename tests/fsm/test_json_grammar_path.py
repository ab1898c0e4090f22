"""The token masker's JSON Schema routing: regex path for small flat schemas, grammar otherwise.

Walks documents token by token through ``compile_constraint(...).matcher()`` on a vocabulary of
single bytes plus multi-byte JSON pieces, and compares the grammar path's masks with the regex
path's on schemas both can take.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlines_like.errors import UnenforcedKeywordWarning
from outlines_like.fsm import RegexCompiled, compile_constraint
from outlines_like.fsm._protocols import Matcher, RejectedTokenError
from outlines_like.fsm.compile import JSON_REGEX_BUDGET, clear_caches
from outlines_like.fsm.grammar import CompiledGrammar, compile_grammar
from outlines_like.fsm.regex_dfa import compile_regex_auto
from outlines_like.fsm.vocabulary import Vocabulary
from outlines_like.types import CFG, JsonSchema
from outlines_like.types.json_schema import json_schema_to_regex
from outlines_like.types.json_schema_grammar import json_schema_to_grammar
from tests.types.test_json_schema_grammar import chain  # the issue's chain of definitions

SCHEMAS = Path(__file__).parent.parent / "types" / "schemas"
PIECES = [
    b'{"',
    b'":',
    b'","',
    b'"}',
    b'"]',
    b"},{",
    b"}]",
    b"[{",
    b"true",
    b"null",
    b"false",
    b"12",
    b"0.",
    b',"',
    b'":"',
    b'": ',
    b", ",
    b' "',
    b"name",
    b"value",
    b"children",
    b'"a":{',
    "é".encode(),
]
TOKENS = [bytes([i]) for i in range(256)] + PIECES + [b"<eos>"]
EOS = len(TOKENS) - 1
VOCAB = Vocabulary(TOKENS, [EOS])
SETTINGS = settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def tokenize(text: bytes) -> list[int]:
    """Greedy longest-match tokenization over ``TOKENS`` (every byte is a token)."""
    by_bytes = {t: i for i, t in enumerate(TOKENS[:-1])}
    longest = max(len(t) for t in PIECES)
    ids, i = [], 0
    while i < len(text):
        for size in range(min(longest, len(text) - i), 0, -1):
            if text[i : i + size] in by_bytes:
                ids.append(by_bytes[text[i : i + size]])
                i += size
                break
    return ids


def allowed(matcher: Matcher) -> set[int]:
    return set(matcher.allowed_token_ids().tolist())


def walk(matcher: Matcher, text: bytes) -> bool:
    """Feed ``text``; whether every token was allowed (mask and ``is_allowed`` agree) and EOS
    is allowed at the end."""
    bits = np.zeros((VOCAB.size + 31) // 32, dtype=np.int32)
    for token in tokenize(text):
        matcher.fill_bitmask(bits)
        in_mask = bool((int(bits[token // 32]) >> (token % 32)) & 1)
        assert in_mask == matcher.is_allowed(token)
        if not in_mask:
            with pytest.raises(RejectedTokenError):
                matcher.advance(token)
            return False
        matcher.advance(token)
    return matcher.is_allowed(EOS)


# ---------------------------------------------------------------------------- routing


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({"type": "object", "properties": {"a": {"type": "integer"}}}, RegexCompiled),
        (json.loads((SCHEMAS / "bench_json_medium.json").read_text()), RegexCompiled),
        (json.loads((SCHEMAS / "recursive_tree.json").read_text()), CompiledGrammar),
        (chain(3), RegexCompiled),
        (chain(9), CompiledGrammar),
        (
            {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(80)}},
            CompiledGrammar,
        ),
    ],
    ids=["flat", "medium", "recursive", "chain3", "chain9", "optional80"],
)
def test_schemas_are_routed_by_measured_size(schema: dict[str, Any], path: type) -> None:
    compiled = compile_constraint(JsonSchema(schema), VOCAB)
    assert isinstance(compiled, path)
    if path is RegexCompiled:
        assert len(json_schema_to_regex(schema)) <= JSON_REGEX_BUDGET


@pytest.mark.parametrize("depth", [8, 9, 20])
def test_the_issues_chain_compiles_fast_and_walks(depth: int) -> None:
    clear_caches()
    start = time.perf_counter()
    compiled = compile_constraint(JsonSchema(chain(depth)), VOCAB)
    assert time.perf_counter() - start < 5.0  # the regex path took 8 s at depth 8, 90 s at 9
    assert isinstance(compiled, CompiledGrammar)
    doc: dict[str, Any] = {"v": 1}
    for _ in range(depth):
        doc = {"a": doc, "b": {}}
    assert walk(compiled.matcher(), json.dumps(doc, separators=(",", ":")).encode())
    assert not walk(compiled.matcher(), b'{"b":{},"a":{}}')
    assert not walk(compiled.matcher(), b'{"a":{"v":1.5}}')


def test_recursion_goes_deeper_than_the_regex_unrolling() -> None:
    schema = json.loads((SCHEMAS / "recursive_tree.json").read_text())
    node: dict[str, Any] = {"value": 0, "children": []}
    for i in range(12):
        node = {"value": i, "children": [node]}
    compiled = compile_constraint(JsonSchema(schema), VOCAB)
    assert walk(compiled.matcher(), json.dumps(node, separators=(",", ":")).encode())
    spaced = compile_constraint(JsonSchema(schema, whitespace_pattern="[ ]?"), VOCAB)
    assert walk(spaced.matcher(), json.dumps(node).encode())
    assert not walk(spaced.matcher(), json.dumps(node, indent=2).encode())


def test_lenient_warnings_come_once_from_the_path_taken() -> None:
    clear_caches()
    for schema in ({"type": "integer", "multipleOf": 3}, {**chain(9), "minProperties": 3}):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compile_constraint(JsonSchema(schema, lenient=True), VOCAB)
        assert [w.category for w in caught] == [UnenforcedKeywordWarning]


# -------------------------------------------------------- grammar masks == regex masks

SAME = [
    "bench_json_small",
    "bench_json_medium",
    "openai_get_weather",
    "openai_search_flights",
    "pydantic_person",
    "integer_ranges",
    "unicode_keys_and_enums",
    "tuple_prefix_items",
    "array_bounds",
    "all_optional",
    "enum_mixed",
]


@pytest.mark.parametrize("name", SAME)
def test_grammar_masks_equal_regex_masks(name: str) -> None:
    """On schemas both paths take, every mask along valid documents is the same.

    Objects are closed first: the extra members an open object allows are free values, which
    the grammar nests deeper than the regex (``max_any_depth``), by design.
    """
    schema = closed(json.loads((SCHEMAS / f"{name}.json").read_text()))
    regex = json_schema_to_regex(schema)
    by_regex = RegexCompiled(compile_regex_auto(regex), VOCAB)
    by_grammar = compile_grammar(CFG(json_schema_to_grammar(schema), "lark"), VOCAB)

    @SETTINGS
    @given(text=st.from_regex(regex, fullmatch=True))
    def check(text: str) -> None:
        left, right = by_regex.matcher(), by_grammar.matcher()
        for token in tokenize(text.encode()):
            assert allowed(left) == allowed(right), text
            left.advance(token)
            right.advance(token)
        assert allowed(left) == allowed(right)
        assert EOS in allowed(left)  # (a number may go on: 1 and 1.0 are one enum value)

    check()


def closed(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object that does not say."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if out.get("type") == "object" or "properties" in out:
        out.setdefault("additionalProperties", False)
    return out
