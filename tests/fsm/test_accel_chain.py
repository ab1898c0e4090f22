"""Compiled string bodies (:mod:`outlines_like.fsm._accel_chain`): rows equal the byte walk's.

A string-body state's row is read from the vocabulary's lexeme sets, with the chain and the
boundary tokens walked by kernels; here every reachable state's row is compared with the
token-by-token walk, on eager and lazy DFAs, random vocabularies of string pieces (quotes,
escapes, control bytes, split characters, long runs of characters) and bounded, free and
escaped string bodies. Skipped without numba.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import outlines_like.fsm.index as index_mod
from outlines_like.fsm import Vocabulary, _accel
from outlines_like.fsm.index import JSON_STRING_BODY, TokenIndex, token_table
from outlines_like.fsm.regex_dfa import ByteDFA, LazyByteDFA, compile_regex, compile_regex_auto
from tests.fsm.test_lexemes import PATTERNS as LEXEME_PATTERNS

pytestmark = pytest.mark.skipif(
    not _accel.available(), reason="numba is not installed (the accel extra)"
)

PIECES = [b"a", b"b", b" ", b"e", b"\"", b"\\", b"\\n", b"\n", b"\t", b",", b"}",
          "é".encode(), "€".encode(), "😀".encode(), "中".encode(),
          b"\xc3", b"\xe2\x82", b"\xf0\x9f", b"\x80", b"\xed\xa0", b"\xe0\x80"]  # fmt: skip

NOT_AB = (
    r'"(?:|[^"\\\x00-\x1fa][^"\\\x00-\x1f]*'
    r'|a(?:|[^"\\\x00-\x1fb][^"\\\x00-\x1f]*|b[^"\\\x00-\x1f]+))"'
)

# the shared sets' patterns, and one with a bounded body beside a free one
PATTERNS = [
    *LEXEME_PATTERNS[:-1],
    r'\{"a": ?"[^"\\\x00-\x1f]{0,12}"(, ?"b": ?"[^"\\\x00-\x1f]*")?\}',
    # the chain's byte set changes on the way (the longer tokens are walked from its end)
    r'"[^"\\x]{2}[^"\\y]*"',
    r'"[^"\\x]{0,3}[^"\\y]{0,4}"',
    # a closing quote dead from the first positions (minLength), and two bounded strings on
    # one byte set: the boundary walk's kept live items are per quote target
    r'\{"a": ?"[^"\\\x00-\x1f]{2,9}", ?"b": ?"[^"\\\x00-\x1f]{0,5}"\}',
    # a member name that is not "ab" (an additionalProperties key): a one-step chain on
    # every byte but "a", then a free body
    NOT_AB,
]


def random_vocab(seed: int) -> Vocabulary:
    """Mostly string-body tokens (so the shared sets apply), and the boundary ones."""
    rng = np.random.default_rng(seed)
    tokens = {bytes([b]) for b in range(0x20, 0x7F)}
    while len(tokens) < 600:
        n = int(rng.integers(1, 6)) if rng.random() < 0.9 else int(rng.integers(6, 40))
        weights = np.array([6, 4, 4, 4, 1, 1, 1, 1, 1, 1, 1, 3, 2, 1, 3, 1, 1, 1, 1, 1, 1], float)
        parts = rng.choice(len(PIECES), size=n, p=weights / weights.sum())
        tokens.add(b"".join(PIECES[k] for k in parts))
    return Vocabulary([b"<eos>", *sorted(tokens)], [0])


def byte_walk_ids(dfa: ByteDFA | LazyByteDFA, vocab: Vocabulary, state: int) -> list[int]:
    ids = [i for i, t in enumerate(vocab.tokens) if i and dfa.step(state, t) >= 0]
    return [0, *ids] if dfa.is_accepting(state) else ids


def reachable_rows(
    dfa: ByteDFA | LazyByteDFA, vocab: Vocabulary, limit: int
) -> list[tuple[int, list[int]]]:
    """(state, allowed ids by the compiled index) for up to ``limit`` states, breadth first."""
    return index_rows(TokenIndex(dfa, vocab), limit)


def index_rows(index: TokenIndex, limit: int) -> list[tuple[int, list[int]]]:
    """(state, allowed ids by ``index``) for up to ``limit`` states, breadth first."""
    vocab, dfa = index.vocab, index.dfa
    out: list[tuple[int, list[int]]] = []
    todo, seen = [dfa.start], {dfa.start}
    while todo and len(out) < limit:
        state = todo.pop(0)
        row = index.row(state)
        ids = row.ids(vocab.size).tolist()
        out.append((state, ids))
        for tok in ids:
            if tok and (nxt := row.next_state(tok)) not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return out


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the rows the compiled string-body walk produced; lets toy vocabularies use it."""
    monkeypatch.setattr(index_mod, "_LEXEME_SHARE", 10**6)
    taken = [0]
    real = index_mod._compiled_lexeme_walk

    def counting(*args: object) -> object:
        out = real(*args)  # type: ignore[arg-type]
        taken[0] += bool(out)
        return out

    monkeypatch.setattr(index_mod, "_compiled_lexeme_walk", counting)
    return taken


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("chain_steps", [1 << 16, 3])
def test_compiled_string_rows_equal_the_byte_walk(
    monkeypatch: pytest.MonkeyPatch, counted: list[int], seed: int, pattern: str, chain_steps: int
) -> None:
    """Every reachable row, eager and lazy; a short chain leaves long tokens to the item walk."""
    monkeypatch.setattr(index_mod, "_COMPILED_CHAIN_STEPS", chain_steps)
    vocab = random_vocab(seed)
    for dfa in (compile_regex(pattern), compile_regex_auto(pattern, eager_nfa_limit=0)):
        for state, ids in reachable_rows(dfa, vocab, 120):
            assert ids == byte_walk_ids(dfa, vocab, state), (pattern, state)
    assert counted[0] > 0


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_lazy_dfa_of_the_pure_builder_takes_the_trie_walk(
    monkeypatch: pytest.MonkeyPatch, pattern: str
) -> None:
    """A lazy DFA built with the compiled walk off has no kernels for its rows: with the walk
    back on, its string bodies take the trie walk (the compiled string-body walk declines)."""
    monkeypatch.setattr(index_mod, "_LEXEME_SHARE", 10**6)
    declined = [0]
    real = index_mod._compiled_lexeme_walk

    def counting(*args: object) -> object:
        out = real(*args)  # type: ignore[arg-type]
        declined[0] += out is None
        return out

    monkeypatch.setattr(index_mod, "_compiled_lexeme_walk", counting)
    vocab = random_vocab(4)
    _accel.set_enabled(False)
    try:
        dfa = compile_regex_auto(pattern, eager_nfa_limit=0)
    finally:
        _accel.set_enabled(None)
    assert isinstance(dfa, LazyByteDFA)
    for state, ids in reachable_rows(dfa, vocab, 60):
        assert ids == byte_walk_ids(dfa, vocab, state), (pattern, state)
    assert declined[0] > 0


@pytest.mark.parametrize("pattern", PATTERNS)
def test_compiled_chain_equals_the_pure_chain(pattern: str) -> None:
    """:meth:`ChainMemo.follow` finds :func:`_char_chain`'s chain, state by state."""
    vocab = random_vocab(3)
    table = token_table(vocab)
    for dfa in (compile_regex(pattern), compile_regex_auto(pattern, eager_nfa_limit=0)):
        lazy = dfa if isinstance(dfa, LazyByteDFA) else None
        memo = index_mod._chain_memo(table)
        states = [s for s, _ in reachable_rows(dfa, vocab, 60)]
        for state in states:
            got = memo.follow(dfa.transitions, state, lazy)
            assert got is not None
            chain, o_key, loop, dead = got
            _, want_o, want, want_loop, want_dead = index_mod._char_chain(
                dfa.transitions, state, lazy, {}, memo.max_steps
            )
            assert o_key == want_o, state
            if want_o is not None:
                # the DFA's states: the same ones (a lazy DFA numbers them as it finds them)
                assert chain.tolist() == want, state
                assert (loop, dead) == (want_loop, want_dead), state


def test_chain_tails_cover_every_unfit_token() -> None:
    """The compiled walk's table: the suffix table's items, sorted, grouped by first byte."""
    vocab = random_vocab(4)
    sets = token_table(vocab).lexemes.chars(JSON_STRING_BODY)
    tails = sets.chain_tails()
    sfx = sets.suffixes()
    got = sorted(
        (int(t), bytes(tails.flat[b:e]), int(p))
        for t, b, e, p in zip(tails.ids, tails.begin, tails.end, tails.pre, strict=True)
    )
    want = sorted(
        (int(t), s, int(p))
        for t, s, p in zip(sfx.ids, sfx.tokens_by_pos, sfx.pre_chars, strict=True)
    )
    assert got == want
    items = [bytes(tails.flat[b:e]) for b, e in zip(tails.begin, tails.end, strict=True)]
    assert items == sorted(items)
    assert tails.same.tolist() == [0, *(int(a == b) for a, b in itertools.pairwise(items))]
    for g, byte in enumerate(tails.group_byte.tolist()):
        lo, hi = int(tails.group_lo[g]), int(tails.group_lo[g + 1])
        assert {it[0] for it in items[lo:hi]} == {byte}
        pre = tails.pre[lo:hi]
        assert (int(pre.min()), int(pre.max())) == tuple(tails.group_pre[2 * g : 2 * g + 2])
    # partial: a proper prefix of a character (so it lives wherever the chain steps on)
    for it, flag in zip(items, tails.partial.tolist(), strict=True):
        whole = any(
            (it + rest).decode("utf-8", "strict") and len((it + rest).decode()) == 1
            for rest in (b"\x80", b"\x80\x80", b"\x80\x80\x80", b"\xa0", b"\xa0\x80",
                         b"\x90\x80", b"\x90\x80\x80", b"\xa0\x80\x80", b"\x9f\xbf", b"\x9f")
            if _decodes(it + rest)
        )  # fmt: skip
        assert bool(flag) == (len(it) < 4 and it[0] >= 0xC0 and whole), it


def test_body_mask_adds_the_partial_characters_the_chain_decides() -> None:
    """``body_mask``: ``mask_upto`` and the partial items with a step left; their groups."""
    vocab = random_vocab(4)
    table = token_table(vocab)
    sets = table.lexemes.chars(JSON_STRING_BODY)
    tails = sets.chain_tails()
    assert tails.partial.any()
    partial = [
        (int(t), int(p)) for t, p, f in zip(tails.ids, tails.pre, tails.partial, strict=True) if f
    ]
    assert sorted(
        zip(tails.partial_ids.tolist(), tails.partial_pre.tolist(), strict=True)
    ) == sorted(partial)
    for g in range(tails.group_byte.shape[0]):
        lo, hi = int(tails.group_lo[g]), int(tails.group_lo[g + 1])
        assert tails.group_partial[g] == int(tails.partial[lo:hi].all())
    for m, loop in [(0, False), (1, False), (2, False), (3, True), (5, False), (200, False)]:
        fit = np.flatnonzero(
            np.unpackbits(
                sets.mask_upto(m if not loop else 10**6).view(np.uint8), bitorder="little"
            )
        )
        want = set(fit.tolist()) | {t for t, p in partial if loop or p < m}
        got = np.unpackbits(sets.body_mask(m, loop).view(np.uint8), bitorder="little")
        assert np.flatnonzero(got).tolist() == sorted(want), (m, loop)


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_mask_upto_from_a_smaller_mask_equals_a_fresh_one() -> None:
    vocab = random_vocab(5)
    table = token_table(vocab)
    sets = table.lexemes.chars(JSON_STRING_BODY)
    for k in (0, 1, 3, 2, 7, 39, 5):
        mask = sets.mask_upto(k)
        allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))
        assert allowed.tolist() == sorted(
            int(table.ids[p]) for p, n in zip(sets.fit_pos, sets.fit_chars, strict=True) if n <= k
        )


def test_one_call_walks_other_states_and_leaves_string_bodies(
    monkeypatch: pytest.MonkeyPatch, counted: list[int]
) -> None:
    """The first visit's one call (LazyByteDFA.visit): it walks the states that are no string
    body (the rows, EOS bits included, equal the byte walk's) and leaves string bodies to the
    shared sets."""
    from outlines_like.fsm._subset import VISIT_BODY, VISIT_WALKED

    real = LazyByteDFA.visit
    seen = {VISIT_WALKED: 0, VISIT_BODY: 0}

    def visit(self: LazyByteDFA, *args: Any) -> int:
        code = real(self, *args)
        seen[code] += 1
        return code

    monkeypatch.setattr(LazyByteDFA, "visit", visit)
    vocab = random_vocab(6)
    dfa = compile_regex_auto(PATTERNS[-4], eager_nfa_limit=0)
    for state, ids in reachable_rows(dfa, vocab, 120):
        assert ids == byte_walk_ids(dfa, vocab, state), state
    assert seen[VISIT_WALKED] > 0
    assert seen[VISIT_BODY] > 0
    assert counted[0] > 0  # the bodies' masks came from the shared sets


def test_chain_memos_share_the_sequence_arrays_of_one_list() -> None:
    from outlines_like.fsm._accel_chain import ChainMemo
    from outlines_like.fsm.index import NON_ASCII

    def fresh(sequences: list[list[tuple[int, int]]]) -> list[list[int]]:
        off = [0]
        for seq in sequences:
            off.append(off[-1] + len(seq))
        flat = [r for seq in sequences for r in seq]
        return [off, [lo for lo, _ in flat], [hi for _, hi in flat]]

    first, second = ChainMemo(NON_ASCII, 16, 2), ChainMemo(NON_ASCII, 8, 1)
    assert all(a is b for a, b in zip(first.seq, second.seq, strict=True))
    assert [a.tolist() for a in first.seq] == fresh(NON_ASCII)
    assert all(a.dtype == np.int32 for a in first.seq)
    other = [[(0xC2, 0xDF), (0x80, 0xBF)], [(0xE1, 0xEC), (0x80, 0xBF), (0x80, 0xBF)]]
    third = ChainMemo(other, 16, 2)  # another list: its own arrays
    assert [a.tolist() for a in third.seq] == fresh(other)
    assert [a.tolist() for a in ChainMemo(NON_ASCII, 16, 2).seq] == fresh(NON_ASCII)


def test_a_one_step_chain_takes_the_trie_walk_and_builds_no_sets(
    counted: list[int],
) -> None:
    """A name's first character (any but "a"), then a free body: the chain stops after one
    step, so nearly every token would be walked whole; the trie walk does it, and the
    vocabulary builds no sets for the first character's byte set (~25 ms on llama3)."""
    vocab = random_vocab(5)
    table = token_table(vocab)
    no_a = index_mod._ascii_set(bytes(range(0x20)) + b'"\\a')
    for dfa in (compile_regex(NOT_AB), compile_regex_auto(NOT_AB, eager_nfa_limit=0)):
        index = TokenIndex(dfa, vocab)
        start = dfa.step(dfa.start, b'"')
        ids = index.row(start).ids(vocab.size).tolist()
        assert ids == byte_walk_ids(dfa, vocab, start)
        assert no_a not in table.lexemes._sets
        after = dfa.step(start, b"z")  # the free body: its chain loops, the sets serve it
        assert index.row(after).ids(vocab.size).tolist() == byte_walk_ids(dfa, vocab, after)
    assert counted[0] > 0
