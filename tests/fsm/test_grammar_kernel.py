"""The LALR kernel (parser inside the compiled walk) against the matcher DFA's pure walk.

From a matcher state ``(configuration, lexer state)``, a list of items (tokens from byte
offsets) must come out the same both ways: the same tokens allowed, and the same items set
aside (at the same byte, in the same configuration and lexer state) because a step needs the
stack's bottom. Checked from every lexer state of every context met, over random
configurations of the grammar corpus, whole and truncated, over deep stacks, and with scratch
buffers too small (the kernel grows them and walks the items again). Needs numba.
"""

from __future__ import annotations

import itertools
import random
import types
from collections.abc import Hashable, Iterator
from typing import cast

import numpy as np
import pytest

from outlines_like.fsm import _accel
from outlines_like.fsm import grammar as grammar_module
from outlines_like.fsm._grammar_kernel import LALRKernel, Pending, rest_trie
from outlines_like.fsm._grammar_walk import ByteTable
from outlines_like.fsm.grammar import CompiledGrammar, _MatcherDFA, compile_grammar
from outlines_like.types import CFG
from tests.fsm.test_grammar import ARITH_LARK, EOS_ID, VOCAB, greedy
from tests.fsm.test_grammar_keys import _configs, _walks
from tests.fsm.test_grammar_properties import GRAMMARS

pytestmark = pytest.mark.skipif(
    not _accel.available(), reason="numba is not installed (the accel extra)"
)

LALR = sorted(name for name, (_, kind) in GRAMMARS.items() if kind == "lalr")


@pytest.fixture(autouse=True)
def accel_on() -> Iterator[None]:
    _accel.set_enabled(True)
    yield
    _accel.set_enabled(None)


def _reference(
    grammar: CompiledGrammar, ids: np.ndarray, offsets: np.ndarray, config: Hashable, lex: int
) -> tuple[set[int], set[Pending]]:
    """The matcher DFA's pure walk (numpy, no kernel) from ``(config, lex)``."""
    dfa = _MatcherDFA(grammar)
    dfa._accel = False
    table = grammar._table
    order = np.argsort(offsets - table.lengths[ids], kind="stable")  # longest rest first
    ids, offsets = ids[order], offsets[order]
    pending: list[tuple[int, int, int]] = []
    starts = np.full(len(ids), dfa.state(config, lex), dtype=np.int64)
    end_ids, end_states = dfa.walk(ids, offsets, starts, pending)
    ok, deep = dfa.viable(end_states)
    out = {(t, o, *dfa.states[s]) for t, o, s in pending}
    if deep is not None:
        for t, s in zip(end_ids[deep].tolist(), end_states[deep].tolist(), strict=True):
            out.add((t, int(table.lengths[t]), *dfa.states[s]))
    return set(end_ids[ok].tolist()), out


def _kernel(
    grammar: CompiledGrammar, ids: np.ndarray, offsets: np.ndarray, config: Hashable, lex: int
) -> tuple[set[int], set[Pending]]:
    kernel = grammar._lalr_kernel()
    assert isinstance(kernel, LALRKernel)
    n = len(ids)
    found, pending = kernel.walk(
        grammar._table,
        ids.astype(np.int32),
        offsets.astype(np.int32),
        [config],
        np.zeros(n, dtype=np.int32),
        np.full(n, lex, dtype=np.int32),
    )
    assert len(set(found.tolist())) == len(found)
    assert len(set(pending)) == len(pending)
    return set(found.tolist()), set(pending)


def _check(grammar: CompiledGrammar, config: Hashable, lex: int, rng: random.Random) -> int:
    """Every text token from byte 0, then each from a random offset (its end included)."""
    table = grammar._table
    ids = table.text_ids.astype(np.int64)
    random_offsets = [rng.randint(0, int(table.lengths[t])) for t in ids]
    pending = 0
    for offsets in (np.zeros_like(ids), np.array(random_offsets, dtype=np.int64)):
        expected = _reference(grammar, ids, offsets, config, lex)
        assert _kernel(grammar, ids, offsets, config, lex) == expected
        pending += len(expected[1])
    return pending


@pytest.mark.parametrize("name", LALR)
def test_kernel_walk_equals_the_pure_walk(name: str) -> None:
    """Random configurations (whole and truncated), every lexer state of their context."""
    grammar = CompiledGrammar(GRAMMARS[name][0], VOCAB)
    assert grammar.is_lalr
    rng = random.Random(name)
    configs = {config for config, _ in _configs(grammar, _walks(grammar, name, walks=12))}
    pending = 0
    for config in sorted(configs, key=repr)[:40]:
        for depth in (None, 1, 2):
            split = grammar._parser.split(config, depth) if depth else None
            if depth and split is None:
                continue
            here = split[0] if split is not None else config
            context = grammar._contexts[grammar._context_id(here)]
            for lex in range(context.n_states):
                pending += _check(grammar, here, lex, rng)
    if name == "arith":
        assert pending  # truncated configurations set items aside


def test_kernel_deep_stacks_and_small_scratch() -> None:
    """Nesting far deeper than the scratch buffer holds at first, which then grows."""
    grammar = CompiledGrammar(ARITH_LARK, VOCAB)
    rng = random.Random("deep")
    m = grammar.matcher()
    for token in greedy(b"(" * 300 + b"-" * 100):
        m.advance(token)
    kernel = grammar._lalr_kernel()
    assert kernel is not None
    assert len(m._stack) > 300
    for lex in range(grammar._contexts[grammar._context_id(m._stack)].n_states):
        kernel._scratch = 0  # no room for any push: items overflow at first
        _check(grammar, m._stack, lex, rng)
        assert kernel._scratch > 0
        for depth in (1, 4, 64):
            split = grammar._parser.split(m._stack, depth)
            assert split is not None
            kernel._scratch = 0
            _check(grammar, split[0], lex, rng)


@pytest.mark.parametrize("trie_rows", [True, False])
@pytest.mark.parametrize("name", LALR)
def test_masks_with_and_without_the_kernel(name: str, trie_rows: bool) -> None:
    """Whole walks: masks with the kernel (whole rows from trie walks, or the keyed rows with
    the items' walk) equal the pure path's, step by step."""
    walks = _walks(CompiledGrammar(GRAMMARS[name][0], VOCAB), f"{name}-masks", walks=15)
    found = []
    for flag in (True, False):
        _accel.set_enabled(flag)
        grammar = CompiledGrammar(GRAMMARS[name][0], VOCAB)
        assert (grammar._lalr_kernel() is not None) is flag
        grammar._trie_rows = trie_rows
        rows = []
        for tokens in walks:
            m = grammar.matcher()
            for token in [*tokens, EOS_ID]:
                rows.append(m.allowed_token_ids().tolist())
                if token == EOS_ID:
                    break
                m.advance(token)
        found.append(rows)
    assert found[0] == found[1]


def test_glr_keeps_the_matcher_dfa() -> None:
    """A grammar that is not LALR(1) has no kernel (its walk stays the matcher DFA's)."""
    grammar = compile_grammar(CFG(GRAMMARS["arith_ws_glr"][0]), VOCAB)
    assert not grammar.is_lalr
    assert grammar._lalr_kernel() is None


def _row_cases(
    name: str, seed: str
) -> Iterator[tuple[CompiledGrammar, Hashable, int, CompiledGrammar, Hashable, int]]:
    """Matcher states of random walks, in a kernel grammar and in a pure one, side by side.

    Yields ``(fast, config, lex, pure, same config, same lex)``: every lexer state of each
    configuration's context where both number them alike, else the walk's own. Both grammars
    replay the same token walks (their LALR states may be numbered apart). Lexer state 0 is a
    matcher state at the start only: a lexeme ends at the byte after it.
    """
    _accel.set_enabled(False)
    pure = CompiledGrammar(GRAMMARS[name][0], VOCAB)
    _accel.set_enabled(True)
    fast = CompiledGrammar(GRAMMARS[name][0], VOCAB)
    walks = _walks(fast, seed, walks=12)
    for (config, lex), (same, same_lex) in list(
        zip(_configs(fast, walks), _configs(pure, walks), strict=True)
    )[:120]:
        context = fast._contexts[fast._context_id(config)]
        other = pure._contexts[pure._context_id(same)]
        lexes = [(lex, same_lex)]
        if np.array_equal(context.transitions, other.transitions):  # the same numbering
            lexes += [(q, q) for q in range(1, context.n_states)]
        for q, same_q in lexes:
            yield fast, config, q, pure, same, same_q


@pytest.mark.parametrize("name", LALR)
def test_trie_rows_equal_the_pure_rows(name: str) -> None:
    """A whole row from one trie walk in the kernel is the pure path's row of the whole stack,
    over random configurations (deep ones too), from every lexer state of their context."""
    checked = 0
    for fast, config, q, pure, same, same_q in _row_cases(name, f"{name}-rows"):
        kernel = fast._lalr_kernel()
        assert kernel is not None
        assert fast._trie is not None
        walked = kernel.row(fast._trie, cast("tuple[int, ...]", config), q, 1 << 30)
        assert walked is not None
        words, deepest = walked
        assert -1 <= deepest < len(cast("tuple[int, ...]", config))
        expected = pure._compute_row(same, same_q).view(np.uint32).copy()
        if pure._eos_ok(same, same_q):  # the kernel's row leaves EOS to the caller
            expected[EOS_ID >> 5] &= ~np.uint32(1 << (EOS_ID & 31))
        np.testing.assert_array_equal(words[:-1], expected)
        checked += 1
        small = kernel.row(fast._trie, cast("tuple[int, ...]", config), q, 1)  # past its budget
        assert small is None or not small[0].any()
    assert checked > 120


@pytest.mark.parametrize("name", LALR)
def test_rows_kept_by_the_top_read_equal_the_pure_rows(name: str) -> None:
    """A trie row kept under the top of the stack its walk read serves other stacks with that
    top (a different bottom), and is their pure row: over random configurations, every lexer
    state of their context, one grammar for all (its kept rows found again)."""
    shared = walked = 0
    for fast, config, q, pure, same, same_q in _row_cases(name, f"{name}-top-rows"):
        kernel = fast._lalr_kernel()
        assert kernel is not None
        stack = cast("tuple[int, ...]", config)
        kept = fast._top_rows.get(q, stack)
        words = fast._top_row(kernel, stack, q)
        assert words is not None
        if kept is not None:
            assert words is kept
            shared += 1
        else:
            walked += 1
        expected = pure._compute_row(same, same_q).view(np.uint32).copy()
        if pure._eos_ok(same, same_q):
            expected[EOS_ID >> 5] &= ~np.uint32(1 << (EOS_ID & 31))
        np.testing.assert_array_equal(words[:-1], expected)
    assert shared
    assert walked


def test_trie_walk_over_budget_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lexer state whose trie walks run past the budget takes the shared walks from then on."""
    monkeypatch.setattr(grammar_module, "_TRIE_BUDGET", 40)  # (the test vocabulary is small)
    grammar = CompiledGrammar(GRAMMARS["json"][0], VOCAB)
    _accel.set_enabled(False)
    pure = CompiledGrammar(GRAMMARS["json"][0], VOCAB)
    matchers = [grammar.matcher(), pure.matcher()]  # (their LALR states may be numbered apart)
    for token in greedy(b'{"abc'):
        rows = [m.allowed_token_ids().tolist() for m in matchers]
        assert rows[0] == rows[1]
        for m in matchers:
            m.advance(token)
    m = matchers[0]
    assert m.allowed_token_ids().tolist() == matchers[1].allowed_token_ids().tolist()
    assert (grammar._context_id(m._stack), m._lex) in grammar._trie_over  # inside a string


@pytest.mark.parametrize("name", LALR)
def test_lexeme_rows_equal_the_pure_rows(name: str) -> None:
    """A row from the lexical walk and the rests past the lexeme's end (walked as a trie in the
    kernel, from the whole stack: what a string's inside takes) is the pure path's row, over
    random configurations, from every lexer state of their context (not only wide ones)."""
    checked = rests = 0
    for fast, config, q, pure, same, same_q in _row_cases(name, f"{name}-lexeme-rows"):
        kernel = fast._lalr_kernel()
        assert kernel is not None
        cid = fast._context_id(config)
        row = fast._lexeme_row(kernel, config, q, cid)
        np.testing.assert_array_equal(row, pure._compute_row(same, same_q))
        lexed = fast._static[(cid, q)]
        rests += sum(len(trie.ids) for _, trie in lexed.rests or [])
        checked += 1
        # the lexical parts kept count in the compile cache's bound
        kept = sum(len(x.bases) + (x.union is not None) for x in fast._static.values())
        assert kept
        assert fast._lexical_rows == kept  # counted as they are kept
        assert fast.nbytes >= kept * fast._finished_row.nbytes
    assert checked > 120
    assert rests  # tokens ran past lexemes' ends and took the rests' trie walk


def test_nbytes_counts_the_lexeme_rows_kept() -> None:
    """``nbytes`` (read by the compile cache) counts the lexical parts the lexer states keep as
    they are kept, not by reading the states (which mask threads add to meanwhile)."""
    grammar = CompiledGrammar(GRAMMARS["json"][0], VOCAB)
    m = grammar.matcher()
    for token in greedy(b'{"abc": [1, "x", {"d": "ef"}], "g": "h'):
        m.allowed_token_ids()
        m.advance(token)
    kept = sum(len(x.bases) + (x.union is not None) for x in grammar._static.values())
    assert kept
    assert grammar._lexical_rows == kept
    assert grammar.nbytes >= kept * grammar._finished_row.nbytes


def test_many_rests_take_the_keyed_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where too many tokens run past the lexeme's end for their trie, the keyed rows serve."""
    monkeypatch.setattr(grammar_module, "_TRIE_BUDGET", 40)  # (the test vocabulary is small)
    monkeypatch.setattr(grammar_module, "_MAX_RESTS", 0)
    grammar = CompiledGrammar(GRAMMARS["json"][0], VOCAB)
    _accel.set_enabled(False)
    pure = CompiledGrammar(GRAMMARS["json"][0], VOCAB)
    matchers = [grammar.matcher(), pure.matcher()]  # (their LALR states may be numbered apart)
    for token in [*greedy(b'{"abc": [1, "x\\n"], "d": {"e": null}}'), EOS_ID]:
        rows = [m.allowed_token_ids().tolist() for m in matchers]
        assert rows[0] == rows[1]
        for m in matchers:
            m.advance(token)
    assert grammar._partials  # (the keyed rows ran)


@pytest.mark.parametrize("every", [1, 3])
@pytest.mark.parametrize("name", LALR)
def test_context_arrays_match_the_contexts(name: str, every: int) -> None:
    """The flat arrays the kernel reads hold each context as it is: its base, transitions,
    terminal per state (the class's first) and reachable terminals per state, appended one
    or a few contexts at a time (the classes growing between appends)."""
    grammar = compile_grammar(CFG(GRAMMARS[name][0], "lark"), VOCAB)
    kernel = grammar._lalr_kernel()
    assert isinstance(kernel, LALRKernel)
    parser = grammar._parser
    for i, state in enumerate(sorted(parser.actions)):  # type: ignore[attr-defined]
        kernel._context(state)
        if i % every == 0:
            kernel._sync()
    kernel._sync()
    _check_context_arrays(grammar, kernel)


def _check_context_arrays(grammar: CompiledGrammar, kernel: LALRKernel) -> None:
    contexts = grammar._contexts
    assert kernel._n_contexts == len(contexts)
    bases = np.cumsum([0] + [c.n_states for c in contexts])
    np.testing.assert_array_equal(kernel.ctx_base, bases[:-1])
    np.testing.assert_array_equal(kernel.trans, np.concatenate([c.flat for c in contexts]))
    terms = [grammar._classes[w][0] if w >= 0 else -1 for c in contexts for w in c.winner.tolist()]
    np.testing.assert_array_equal(kernel.term_of, terms)
    reach = [np.flatnonzero(row).tolist() for c in contexts for row in c.reach]
    assert kernel.reach_first.tolist() == np.cumsum([0] + [len(r) for r in reach]).tolist()
    ends = kernel.reach_first.tolist()
    terms_of = kernel.reach_term.tolist()
    # (per state in any order: the compiled build's are its components')
    assert [sorted(terms_of[a:b]) for a, b in itertools.pairwise(ends)] == reach
    for array in (
        kernel.ctx_base,
        kernel.trans,
        kernel.term_of,
        kernel.reach_first,
        kernel.reach_term,
    ):
        assert array.dtype == np.int32


def _trie_paths(arrays: tuple[np.ndarray, ...]) -> dict[int, bytes]:
    """The bytes from the root to each node of a kernel trie that ends a token, by token."""
    byte, first, node, tok = arrays
    out: dict[int, bytes] = {}
    todo = [(0, b"")]
    while todo:
        x, path = todo.pop()
        if tok[x] >= 0:
            out[int(tok[x])] = path
        for k in range(int(first[x]), int(first[x + 1])):
            todo.append((int(node[k]), path + bytes([int(byte[k])])))
    return out


def test_rest_trie_equals_the_rests_as_bytes() -> None:
    """The rests told apart and sorted in numpy are Python's sorted distinct bytes: each
    item's rest, the trie's tokens in bytes order, over random rests of random tokens with
    zero bytes inside and at their ends (where zero-padded rows tie)."""
    rng = random.Random(7)
    for _ in range(200):
        tokens = [
            bytes(rng.choice([0, 0, 1, 97, 98, 255]) for _ in range(rng.randint(1, 7)))
            for _ in range(rng.randint(1, 40))
        ]
        lengths = np.array([len(t) for t in tokens], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        table = types.SimpleNamespace(
            buf=np.frombuffer(b"".join(tokens), dtype=np.uint8), starts=starts, lengths=lengths
        )
        ids = np.array([rng.randrange(len(tokens)) for _ in range(rng.randint(1, 60))])
        offsets = np.array([rng.randrange(len(tokens[t])) for t in ids], dtype=np.int64)
        rests = [tokens[t][o:] for t, o in zip(ids.tolist(), offsets.tolist(), strict=True)]
        distinct = sorted(set(rests))
        trie = rest_trie(cast("ByteTable", table), ids.astype(np.int32), offsets.astype(np.int32))
        assert [distinct[i] for i in trie.rest_of.tolist()] == rests
        assert _trie_paths(trie.arrays) == dict(enumerate(distinct))
        assert trie.stack_size == max(map(len, distinct)) + 1
        assert trie.words == len(distinct) // 32 + 2
