"""Compiled constraints cross processes as bytes: the same masks after, no vocabulary inside."""

from __future__ import annotations

import multiprocessing
import pickle
import random
from typing import Any

import numpy as np
import pytest

from outlines_like.fsm import Vocabulary, compile_constraint
from outlines_like.fsm._transfer import dump_compiled, load_compiled
from outlines_like.fsm.compile import clear_caches
from outlines_like.fsm.grammar import CompiledGrammar
from outlines_like.fsm.matcher import FreeTextCompiled, RegexCompiled
from outlines_like.fsm.regex_dfa import LazyByteDFA
from outlines_like.types import CFG, JsonSchema, Regex

PIECES = [b'{"', b'":', b'","', b'"}', b"true", b"false", b"12", b", ", b"name", "é".encode()]
TOKENS = [bytes([i]) for i in range(256)] + PIECES + [b"<eos>"]
EOS = len(TOKENS) - 1

SMALL_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
    "required": ["name", "n"],
}
# too large for the regex path: the JSON Schema goes to the grammar
WIDE_SCHEMA = {
    "type": "object",
    "properties": {
        f"p{i}": {"type": "array", "items": {"type": "object", "properties": {"a": {}}}}
        for i in range(60)
    },
}
ARITH_WS = r"""
start: expr
expr: term (ws ADD ws term)*
term: NUM | "(" ws expr ws ")"
ws: SP*
ADD: "+"
SP: " "
NUM: /[0-9]+/
"""
CASES: dict[str, tuple[object, type]] = {
    "regex": (Regex(r"[a-z]{2,5}-[0-9]{2}( é)?"), RegexCompiled),
    "lazy-regex": (Regex("[0-9a-f]{1,3200}"), RegexCompiled),
    "schema-regex-path": (JsonSchema(SMALL_SCHEMA), RegexCompiled),
    "schema-grammar-path": (JsonSchema(WIDE_SCHEMA), CompiledGrammar),
    "lalr-grammar": (
        CFG('start: "[" (item ("," item)*)? "]"\nitem: NUMBER | start\n%import common.NUMBER\n'),
        CompiledGrammar,
    ),
    "glr-grammar": (CFG(ARITH_WS), CompiledGrammar),
    "json-object": (dict, CompiledGrammar),
    "free-text": (None, FreeTextCompiled),
}


def _vocab() -> Vocabulary:
    return Vocabulary(TOKENS, [EOS], special_token_ids=[EOS])


def _walk(compiled: Any, seed: int, steps: int = 60) -> list[tuple[bytes, int]]:
    """Masks along one random walk (the same walk for the same masks and seed)."""
    rng = random.Random(seed)
    matcher = compiled.matcher()
    words = np.zeros(compiled.vocabulary.mask_words, dtype=np.int32)
    trace: list[tuple[bytes, int]] = []
    for _ in range(steps):
        matcher.fill_bitmask(words)
        allowed = matcher.allowed_token_ids()
        if matcher.is_finished() or not allowed.shape[0]:
            break
        token = int(rng.choice(allowed.tolist()))
        trace.append((words.tobytes(), token))
        matcher.advance(token)
    return trace


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_compiled_constraint_round_trips_with_identical_masks(case: str) -> None:
    output_type, kind = CASES[case]
    here, there = _vocab(), _vocab()  # two processes' vocabularies: equal, not the same
    clear_caches()
    compiled = compile_constraint(output_type, here)
    assert isinstance(compiled, kind)
    data = dump_compiled(compiled)
    back = load_compiled(data, there)
    assert type(back) is kind
    if case == "lazy-regex":  # built state by state: its builder travels too
        assert isinstance(back.dfa, LazyByteDFA)
    assert back.vocabulary is there
    for seed in range(4):
        assert _walk(back, seed) == _walk(compile_constraint(output_type, here), seed)


def test_the_vocabulary_is_not_in_the_bytes() -> None:
    big = Vocabulary(
        TOKENS[:-1] + [f"word{i:05d}".encode() for i in range(20_000)] + [b"<eos>"],
        [len(TOKENS) - 1 + 20_000],
    )
    compiled = compile_constraint(Regex("[0-9]{3}"), big)
    data = dump_compiled(compiled)
    assert b"word19999" not in data
    assert len(data) < len(pickle.dumps(big)) / 2


def test_a_lazy_regexs_index_reads_the_receiving_vocabularys_token_trie() -> None:
    # a token index keeps the trie's arrays for its first visits' kernel calls: they are the
    # vocabulary's (a reference in the bytes), never pickled with the index as copies
    from outlines_like.fsm import _accel
    from outlines_like.fsm.index import token_trie

    if not _accel.enabled():
        pytest.skip("the compiled walk needs numba")
    pattern = Regex("[0-9a-f]{1,3200}")
    here, there = _vocab(), _vocab()
    clear_caches()
    compiled = compile_constraint(pattern, here)
    assert isinstance(compiled, RegexCompiled)
    assert isinstance(compiled.dfa, LazyByteDFA)
    _walk(compiled, 0, steps=5)  # first visits: the index set up its kernel arguments
    back = load_compiled(dump_compiled(compiled), there)
    assert isinstance(back, RegexCompiled)
    visit = back.index._visit_args
    assert visit is not None
    assert visit.fixed[0] is token_trie(there).byte
    assert _walk(back, 1) == _walk(compile_constraint(pattern, here), 1)


def test_another_vocabulary_is_refused() -> None:
    data = dump_compiled(compile_constraint(Regex("[0-9]{3}"), _vocab()))
    other = Vocabulary([*TOKENS[:-2], b"x", b"<eos>"], [EOS])
    with pytest.raises(pickle.UnpicklingError, match="another vocabulary"):
        load_compiled(data, other)


def _compile_in_child(pattern: str) -> bytes:
    return dump_compiled(compile_constraint(Regex(pattern), _vocab()))


def test_the_bytes_cross_a_process() -> None:
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no shared objects
    with context.Pool(1) as pool:
        data = pool.apply(_compile_in_child, ("[a-c]+x[0-9]{2}",))
    local = _vocab()
    back = load_compiled(data, local)
    for seed in range(3):
        assert _walk(back, seed) == _walk(compile_constraint(Regex("[a-c]+x[0-9]{2}"), local), seed)
