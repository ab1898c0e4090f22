"""The grammar path's compiled walks (the ``accel`` extra) against its numpy walks.

Both walks of :class:`~outlines_like.fsm.grammar._MatcherDFA` must give the same outputs: which
tokens end in which matcher state (compared by the state's ``(configuration, lexer state)``,
not its id, which depends on the order rows were built), and which are set aside at which byte
because their step needs the stack's bottom. The lexer walks of the whole vocabulary (a trie
walk) must report the same tokens as the numpy walk, and the masks of whole walks must match
too. Tests that need numba are skipped without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from outlines_like.fsm import _accel
from outlines_like.fsm._grammar_walk import byte_table, walk
from outlines_like.fsm.grammar import CompiledGrammar, _MatcherDFA, compile_grammar
from outlines_like.fsm.vocabulary import Vocabulary
from outlines_like.types import CFG
from tests.fsm.test_grammar import (
    ARITH_LARK,
    ARITH_WS,
    JSON_LARK,
    KEYWORDS,
    LARK_TUTORIAL_JSON,
    MULTI,
)

needs_numba = pytest.mark.skipif(
    not _accel.available(), reason="numba is not installed (the accel extra)"
)

# long runs that reach a new configuration at every byte (the walk's Python tail and its
# row building), and tokens crossing several lexemes
RUNS = [b"((((", b"(((((((((", b"----", b"--------", b"))))", b")))))))", b"    ", b"1))", b"((-"]
RUNS += [b'{"a', b'":[', b"[[[[", b"]]]]", b'"}]}', b', "', b"1, 2", b'":{"', b"let x"]
EOS = b"<eos>"

CASES = [
    (JSON_LARK, b'{"a": [1, 2.5, {"b": [[[[null]]]], "c": "x\\u00e9y"}], "d": true}'),
    (LARK_TUTORIAL_JSON, b'{"a": [1, -2.5e+3, {"b": [[[["s"]]]]}], "c": false}'),
    (ARITH_LARK, b"((((((((1 + 2) * -3)))))) - (((((-(((4))))))))) / 5"),
    (ARITH_WS, b"(((1 + 2) * (3 *  4)) + ((((5)))))"),
    (KEYWORDS, b"let x = y; zz; let ab = cd;"),
]


def make_vocab() -> Vocabulary:
    """Every byte, the grammar tests' multi-byte tokens, long runs, EOS."""
    tokens = [bytes([b]) for b in range(256)] + MULTI + RUNS + [EOS]
    return Vocabulary(tokens, eos_token_ids=len(tokens) - 1)


def greedy(vocab: Vocabulary, text: bytes) -> list[int]:
    """Greedy longest-match tokenization."""
    ids = {t: i for i, t in enumerate(vocab.tokens) if i not in vocab.eos_token_ids}
    out, i = [], 0
    while i < len(text):
        best = max((t for t in ids if text.startswith(t, i)), key=len)
        out.append(ids[best])
        i += len(best)
    return out


@pytest.fixture
def accel_on() -> Iterator[None]:
    _accel.set_enabled(True)
    yield
    _accel.set_enabled(None)


def masks(compiled: CompiledGrammar, tokens: list[int]) -> list[list[int]]:
    """The allowed tokens at each step of a walk (stopping at a rejected token)."""
    m = compiled.matcher()
    out = []
    for t in tokens:
        allowed = sorted(m.allowed_token_ids())
        out.append(allowed)
        if t not in allowed:
            break
        m.advance(t)
    return out


@needs_numba
@pytest.mark.parametrize(("grammar", "text"), CASES)
def test_masks_equal(grammar: str, text: bytes) -> None:
    """A whole walk's masks: the compiled walk's equal the numpy walk's."""
    found = []
    for flag in (True, False):
        _accel.set_enabled(flag)
        try:
            vocab = make_vocab()  # its own caches: nothing walked in the other mode is reused
            compiled = compile_grammar(CFG(grammar), vocab)
            assert compiled._dfa._accel is flag
            found.append(masks(compiled, greedy(vocab, text)))
        finally:
            _accel.set_enabled(None)
    assert found[0] == found[1]
    assert len(found[0]) == len(greedy(make_vocab(), text))  # the text is in the language


def outcome(
    dfa: _MatcherDFA, ends: tuple[Any, Any], pending: list[tuple[int, int, int]]
) -> tuple[set[tuple[int, Any]], set[tuple[int, int, Any]]]:
    """A walk's outputs keyed by matcher state (not id); dead items left out."""
    end_ids, end_states = ends
    live = {
        (int(t), dfa.states[int(s)])
        for t, s in zip(end_ids.tolist(), end_states.tolist(), strict=True)
        if s
    }
    return live, {(t, o, dfa.states[s]) for t, o, s in pending}


@needs_numba
@pytest.mark.usefixtures("accel_on")
@pytest.mark.parametrize(("grammar", "text"), CASES)
def test_matcher_walk_equal(grammar: str, text: bytes) -> None:
    """From every matcher state a walk met, the whole vocabulary (from byte 0 and byte 1, each
    state alone and all merged) ends in the same states and sets aside the same items."""
    vocab = make_vocab()
    compiled = compile_grammar(CFG(grammar), vocab)
    compiled._use_kernel = False  # (LALR) the matcher DFA's walk, to meet its states
    masks(compiled, greedy(vocab, text))
    keys = compiled._dfa.states[2:]
    assert keys
    table = byte_table(vocab)
    fast, slow = _MatcherDFA(compiled), _MatcherDFA(compiled)
    fast._accel, slow._accel = True, False
    for offset in (0, 1):
        ids = table.text_ids[table.lengths[table.text_ids] > offset].astype(np.int32)
        offsets = np.full(len(ids), offset, dtype=np.int32)
        merged: list[list[Any]] = [[], []]
        for key in keys:
            results = []
            for dfa, into in ((fast, merged[0]), (slow, merged[1])):
                starts = np.full(len(ids), dfa.state(*key), dtype=np.int64)
                into.append(starts)
                pending: list[tuple[int, int, int]] = []
                results.append(outcome(dfa, dfa.walk(ids, offsets, starts, pending), pending))
            assert results[0] == results[1]
        # every state's items in one walk, longest rest first (as a row's walk does)
        n = len(keys)
        all_ids, all_offsets = np.tile(ids, n), np.tile(offsets, n)
        order = np.argsort(all_offsets - table.lengths[all_ids], kind="stable")
        results = []
        for dfa, starts_list in ((fast, merged[0]), (slow, merged[1])):
            pending = []
            walked = dfa.walk(
                all_ids[order], all_offsets[order], np.concatenate(starts_list)[order], pending
            )
            results.append(outcome(dfa, walked, pending))
        assert results[0] == results[1]


@needs_numba
@pytest.mark.usefixtures("accel_on")
@pytest.mark.parametrize(("grammar", "text"), CASES)
def test_lexer_walk_equal(grammar: str, text: bytes) -> None:
    """Every lexer context from every state: the compiled walks (the whole vocabulary on the
    trie, a list of items from offsets in a loop) report the same items ending in the same
    states, and stopping at the same byte and state, as the numpy walk."""
    vocab = make_vocab()
    compiled = compile_grammar(CFG(grammar), vocab)
    masks(compiled, greedy(vocab, text))
    trie = compiled._trie
    assert trie is not None
    assert trie.dup_of.shape[0]  # tokens with the same bytes as another
    table = byte_table(vocab)
    rng = np.random.default_rng(len(text))
    subset = table.text_ids[::3]
    lists = [
        (table.text_ids, None),
        (subset, None),
        (subset, rng.integers(0, table.lengths[subset] + 1).astype(np.int32)),  # last byte too
    ]
    for context in compiled._contexts:
        for lex in range(context.n_states):
            for ids, offsets in lists:
                found = []
                for with_trie in (trie, None):
                    res = walk(
                        table, context.flat, lex, ids, offsets, accepting=context.accepting,
                        trie=with_trie,
                    )  # fmt: skip
                    ends = zip(ids[res.end_items].tolist(), res.end_states.tolist(), strict=True)
                    stops = zip(
                        ids[res.stop_items].tolist(),
                        res.stop_offsets.tolist(),
                        res.stop_states.tolist(),
                        strict=True,
                    )
                    found.append((sorted(ends), sorted(stops)))
                    assert len(res.end_items) == len(set(res.end_items.tolist()))
                assert found[0] == found[1]


@needs_numba
def test_walk_matcher_kernel() -> None:
    """The kernel alone: end states, stuck items at an unbuilt row, items that need the bottom."""
    trans = np.zeros(5 * 256, dtype=np.int32)
    trans[2 * 256 + ord("a")] = 2  # state 2 loops on "a"
    trans[2 * 256 + ord("b")] = 3
    trans[3 * 256 : 4 * 256] = -2  # state 3: row not built
    trans[2 * 256 + ord("d")] = 1  # "d" needs the stack's bottom
    trans[2 * 256 + ord("c")] = 4
    buf = np.frombuffer(b"aaa" + b"aab" + b"abz" + b"ad" + b"x" + b"ac", dtype=np.uint8).copy()
    pos = np.array([0, 3, 6, 9, 11, 12], dtype=np.int64)
    end = np.array([3, 6, 9, 11, 12, 14], dtype=np.int64)
    states = np.full(6, 2, dtype=np.int32)
    out, stops = _accel.walk_matcher(trans, buf, pos, end, states)
    assert out.tolist() == [2, 3, -1, 0, 0, 4]
    assert stops.stuck.tolist() == [2]
    assert stops.stuck_pos.tolist() == [8]
    assert stops.stuck_state.tolist() == [3]
    assert stops.deep.tolist() == [3]
    assert stops.deep_pos.tolist() == [10]
    assert stops.deep_state.tolist() == [2]
