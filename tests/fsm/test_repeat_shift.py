"""Long counted repetitions (:mod:`outlines_like.fsm._repeat_shift`): loops and shared rows.

The NFA builds record each long repetition's copies (both builds the same entries), the copies
are the shifted blocks the module's argument needs (checked on the built edges), and the rows
a lazy DFA's token index gives states of such repetitions (a chain stopped as a loop, a row
shared by a state one shift on) are the byte walk's, on vocabularies whose tokens are short
enough for repetitions of a few dozen copies to count as long.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import outlines_like.fsm.index as index_mod
from outlines_like.fsm import Vocabulary, _accel
from outlines_like.fsm._regex_nfa import NFA, REPEAT_MIN_COPIES
from outlines_like.fsm._repeat_shift import RepeatShift
from outlines_like.fsm.index import TokenIndex
from outlines_like.fsm.regex_dfa import LazyByteDFA, compile_regex_auto
from outlines_like.types._regex import parse_regex
from tests.fsm.test_accel_chain import PIECES, byte_walk_ids, index_rows

STRING = r'[^"\\\x00-\x1f]'
ESCAPED = rf'(?:{STRING}|\\["\\/bfnrt]|\\u[0-9a-fA-F]{{4}})'
PATTERNS = [
    rf'"{STRING}{{0,60}}"',
    rf'"{ESCAPED}{{0,50}}"',
    rf'"{STRING}{{5,70}}"x?',
    # the same string twice (the second one a copy of the first one's fragment), then a list
    # of strings: repetitions inside another's copies, each recorded
    rf'\{{"a": ?"{ESCAPED}{{0,40}}", ?"b": ?"{ESCAPED}{{0,40}}"\}}',
    rf'\[(?:"{STRING}{{0,45}}", ?){{0,3}}\]',
    # the end of the repetition is the start of a loop of the same strings
    rf'(?:"{STRING}{{0,50}}",)*',
]
# long repetitions whose states are not string bodies (no chain: the trie walk, no shared row)
NOT_BODIES = [r'\[(?:"[a-z é€]{0,45}", ?){0,3}\]', r"(?:ab|c[dé]){0,60}!"]
# states past the copies that take the string's characters too (their rows still exact)
# (and a short alternative beside the copies: the same copies, other states, other rows)
MIXED = [
    rf'"{STRING}{{0,50}}{STRING}*"',
    rf'"{STRING}{{0,50}}[a-z]{{0,3}}"',
    rf'"(?:{STRING}{{0,50}}|{STRING}{{0,3}}\\)"',
]
NOT_RECORDED = [
    "(?:a?){0,50}",  # the item matches the empty string
    "a{0,15}",  # too few copies
    "a{3}",
    "(?:ab)*",
]


def short_vocab(seed: int, pieces: int = 2) -> Vocabulary:
    """Tokens of at most ``pieces`` pieces (at most 8 bytes): a repetition of 16+ copies is
    long for them."""
    rng = np.random.default_rng(seed)
    tokens = {bytes([b]) for b in range(0x20, 0x7F)}
    while len(tokens) < 500:
        n = int(rng.integers(1, pieces + 1))
        parts = rng.choice(len(PIECES), size=n)
        tokens.add(b"".join(PIECES[k] for k in parts))
    return Vocabulary([b"<eos>", *sorted(tokens)], [0])


def builds(pattern: str) -> tuple[NFA, NFA]:
    from outlines_like.fsm._accel_nfa import Program

    tree = parse_regex(pattern, strip_anchors=True)
    python = NFA()
    python.build(tree)
    python.freeze()
    compiled, _, _ = Program(tree).build()
    return python, compiled


LEXEME_SHARE = index_mod._LEXEME_SHARE

needs_numba = pytest.mark.skipif(
    not _accel.available(), reason="numba is not installed (the accel extra)"
)


@needs_numba
@pytest.mark.parametrize("pattern", PATTERNS + NOT_BODIES + MIXED + NOT_RECORDED)
def test_both_builds_record_the_same_repeats(pattern: str) -> None:
    python, compiled = builds(pattern)
    assert python.repeats.tolist() == compiled.repeats.tolist()
    recorded = python.repeats.shape[0] > 0
    assert recorded == (pattern not in NOT_RECORDED)


@pytest.mark.parametrize("pattern", PATTERNS + NOT_BODIES)
def test_recorded_copies_are_shifted_blocks(pattern: str) -> None:
    """Copy ``j + 1``'s edges are copy ``j``'s moved one block on; every copy's start has an
    epsilon edge to the end state just before the blocks."""
    nfa = NFA()
    nfa.build(parse_regex(pattern, strip_anchors=True))
    nfa.freeze()
    assert nfa.repeats.shape[0]
    for base, width, k in nfa.repeats.tolist():
        assert k >= REPEAT_MIN_COPIES
        assert width > 0
        end = base + width * k
        first = block_edges(nfa, base, width, 0)
        for j in range(1, k - 1):  # (the last block's end state leaves to the end only)
            assert block_edges(nfa, base, width, j) == first, (pattern, base, j)
        for s in range(base, end):  # nothing outside the blocks but the end is reached
            for e in range(nfa.off[s], nfa.off[s + 1]):
                assert base <= nfa.dst[e] < end
            for e in range(nfa.eps_off[s], nfa.eps_off[s + 1]):
                assert base <= nfa.eps_dst[e] < end or nfa.eps_dst[e] == base - 1


def block_edges(
    nfa: NFA, base: int, width: int, j: int
) -> tuple[set[tuple[int, int, int, int]], set[tuple[int, int]]]:
    """Block ``j``'s edges, the states of blocks ``j`` and ``j + 1`` moved back by ``j``."""
    lo, hi = base + j * width, base + (j + 1) * width

    def at(s: int) -> int:
        return s - j * width if lo <= s < hi + width else s

    byte = set()
    eps = set()
    for s in range(lo, hi):
        for e in range(nfa.off[s], nfa.off[s + 1]):
            byte.add((at(s), nfa.lo[e], nfa.hi[e], at(nfa.dst[e])))
        for e in range(nfa.eps_off[s], nfa.eps_off[s + 1]):
            eps.add((at(s), at(nfa.eps_dst[e])))
    return byte, eps


@pytest.fixture
def shifts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the chains stopped as loops; lets toy vocabularies take the shared sets."""
    monkeypatch.setattr(index_mod, "_LEXEME_SHARE", 10**6)
    loops = [0]
    real = RepeatShift.loops

    def counting(self: RepeatShift, *args: object) -> bool:
        out = real(self, *args)  # type: ignore[arg-type]
        loops[0] += out
        return out

    monkeypatch.setattr(RepeatShift, "loops", counting)
    return loops


@needs_numba
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("pattern", PATTERNS + NOT_BODIES + MIXED)
def test_rows_of_long_repetitions_are_the_byte_walks(
    shifts: list[int], seed: int, pattern: str
) -> None:
    """Every reachable row (breadth first) equals the token-by-token walk; string bodies
    stop their chains as loops and share rows."""
    vocab = short_vocab(seed)
    dfa = compile_regex_auto(pattern, eager_nfa_limit=0)
    assert isinstance(dfa, LazyByteDFA)
    index = TokenIndex(dfa, vocab)
    assert index._chain_memo is not None
    assert index._chain_memo.shift is not None
    for state, ids in index_rows(index, 400):
        assert ids == byte_walk_ids(dfa, vocab, state), (pattern, state)
    if pattern not in MIXED:
        assert (shifts[0] > 0) == (pattern in PATTERNS)
        assert bool(index._shifted) == (pattern in PATTERNS)


@needs_numba
@pytest.mark.parametrize("pattern", PATTERNS[:3])
def test_a_walk_far_into_a_long_string_shares_rows(shifts: list[int], pattern: str) -> None:
    """Down one long string, position by position: later positions share one row, the rows
    near the end (a token could reach it) are their own, and each equals the byte walk."""
    vocab = short_vocab(3)
    dfa = compile_regex_auto(pattern, eager_nfa_limit=0)
    assert isinstance(dfa, LazyByteDFA)
    index = TokenIndex(dfa, vocab)
    char = vocab.tokens.index(b"e")
    state = dfa.step(dfa.start, b'"')
    masks = []
    row = index.row(state)
    while row.allows(char):
        assert row.ids(vocab.size).tolist() == byte_walk_ids(dfa, vocab, state)
        masks.append(row.mask)
        state = row.next_state(char)
        row = index.row(state)
    groups = Counter(id(m) for m in masks)
    common, shared = groups.most_common(1)[0]
    assert shared >= 10
    assert not any(id(m) == common for m in masks[-5:])


def test_keys_and_loops_on_a_bounded_string() -> None:
    """A key is the state's NFA states with its copies moved back to the first one; ``None``
    near the end; a chain step one copy on loops, any other step does not."""
    dfa = compile_regex_auto('"[a-z]{0,40}"', eager_nfa_limit=0)
    assert isinstance(dfa, LazyByteDFA)
    shift = RepeatShift(dfa.nfa, reach=4)
    c = [dfa.step(dfa.start, b'"' + b"a" * n) for n in range(41)]
    assert shift.key(dfa.subset(c[0])) is None  # before the copies
    keys = [shift.key(dfa.subset(s)) for s in c[1:]]
    far = 40 - 3 - 4 + 1  # after ``far`` characters a token of 4 bytes could reach the end
    assert keys[0] is not None
    assert all(k == keys[0] for k in keys[:far])
    assert all(k is None for k in keys[far:])
    step = bytes(range(ord("a"), ord("z") + 1))
    o = bytes(b in step for b in range(128))
    assert shift.loops(dfa.subset, c[1], c[2], o)
    assert not shift.loops(dfa.subset, c[1], c[3], o)  # not one copy on
    assert not shift.loops(dfa.subset, c[far + 1], c[far + 2], o)  # near the end
    # a byte of the step that the states past the copies also take: not a loop
    assert not RepeatShift(dfa.nfa, reach=4).loops(
        dfa.subset, c[1], c[2], bytes(b in b'a"' for b in range(128))
    )
    assert RepeatShift.of(dfa.nfa, reach=38) is None


ITEMS = [STRING, ESCAPED, r'[^"\\\x00-\x1f,]', rf"(?:{STRING}|ab)", r"(?:[^\x00-\x7f]|[a-f ])"]
TAILS = ["", "x?", f"{STRING}*", "[a-z]{0,2}", r"\\\\?"]


@st.composite
def long_repetitions(draw: st.DrawFn) -> str:
    """A bounded string-like body of 16-40 copies, in a string or a short list of them."""
    item = draw(st.sampled_from(ITEMS))
    lo = draw(st.integers(0, 3))
    hi = draw(st.integers(max(lo + REPEAT_MIN_COPIES, 16), 40))
    body = f'"{item}{{{lo},{hi}}}"{draw(st.sampled_from(TAILS))}'
    if draw(st.booleans()):
        return body
    return rf"\[(?:{body}, ?){{0,2}}\]"


@needs_numba
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=long_repetitions(), seed=st.integers(0, 3))
def test_random_long_repetitions_give_the_byte_walks_rows(pattern: str, seed: int) -> None:
    """Every reachable row of random long repetitions, with the loop rule and shared rows on,
    equals the token-by-token walk."""
    index_mod._LEXEME_SHARE = 10**6  # (restored below: toy vocabularies take the shared sets)
    try:
        vocab = short_vocab(seed)
        dfa = compile_regex_auto(pattern, eager_nfa_limit=0)
        assert isinstance(dfa, LazyByteDFA)
        index = TokenIndex(dfa, vocab)
        for state, ids in index_rows(index, 150):
            assert ids == byte_walk_ids(dfa, vocab, state), (pattern, state)
        # and down the strings, mostly one character at a time, to their last copies
        rng = np.random.default_rng(seed)
        char = vocab.tokens.index(b"e")
        state = dfa.start
        for _ in range(120):
            row = index.row(state)
            ids = row.ids(vocab.size).tolist()
            assert ids == byte_walk_ids(dfa, vocab, state), (pattern, state)
            text = [t for t in ids if t]
            if not text:
                break
            tok = char if char in text and rng.random() < 0.8 else int(rng.choice(text))
            state = row.next_state(tok)
    finally:
        index_mod._LEXEME_SHARE = LEXEME_SHARE
