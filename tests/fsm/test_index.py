"""Token index: the vectorised walk against a token-by-token scalar walk, lazy rows, packing.

Every test runs on both walks: the pure one and, with numba (the ``accel`` extra), the
compiled one (``TokenIndex`` rows; ``walk_tokens`` and ``_walk_one`` are pure either way).
"""

from __future__ import annotations

import gc
import mmap
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from outlines_like.fsm import Vocabulary, _accel, _row_tables
from outlines_like.fsm.index import TokenIndex, TokenTable, pack_ids, token_table, walk_tokens
from outlines_like.fsm.regex_dfa import LazyByteDFA, compile_regex, compile_regex_auto
from tests.fsm.test_regex_dfa import empty_pool

TOKENS = [
    b"a",
    b"b",
    b"ab",
    b"ba",
    b"abc",
    b"1",
    b"12",
    b"123",
    b"-",
    b"-1",
    b" ",
    b"\xc3",
    b"\xa9",
    b"\xc3\xa9",
    b"caf\xc3",
    b"\xa9s",
    b"<eos>",
    b"<pad>",
    b"",
    b"a" * 20,
    b"a" * 19 + b"b",
    b"\xe2\x82\xac",
    b"x" * 40,
]
EOS = 16
SPECIAL = (17,)


@pytest.fixture(autouse=True, params=["pure", "accel"])
def walk(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test on the pure walk and on the compiled one."""
    if request.param == "accel" and not _accel.available():
        pytest.skip("numba is not installed (the accel extra)")
    _accel.set_enabled(request.param == "accel")
    yield str(request.param)
    _accel.set_enabled(None)


@pytest.fixture
def vocab() -> Vocabulary:
    return Vocabulary(TOKENS, [EOS], SPECIAL)


def scalar_walk(dfa: object, vocab: Vocabulary, state: int) -> tuple[list[int], list[int]]:
    ids, ends = [], []
    for i, tok in enumerate(vocab.tokens):
        if not tok or i in vocab.special_token_ids:
            continue
        end = dfa.step(state, tok)  # type: ignore[attr-defined]
        if end >= 0:
            ids.append(i)
            ends.append(end)
    return ids, ends


PATTERNS = [
    r"[ab]+",
    r"-?[0-9]+",
    r"(ab|ba)c?",
    r"café?s?",
    r"a{0,25}b?",
    r"x*",
    r"[^\x00-\x1f]*",
    r"€[0-9]",
    r" ?(a|b|1)",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_walk_matches_scalar_walk_from_every_state(vocab: Vocabulary, pattern: str) -> None:
    dfa = compile_regex(pattern)
    table = token_table(vocab)
    results = walk_tokens(dfa.transitions, table, range(dfa.n_states))
    for state, (ids, ends) in enumerate(results):
        ref_ids, ref_ends = scalar_walk(dfa, vocab, state)
        assert ids.tolist() == ref_ids, (pattern, state)
        assert ends.tolist() == ref_ends, (pattern, state)
        assert ids.dtype == np.int32


@pytest.mark.parametrize("pattern", PATTERNS)
def test_lazy_dfa_rows_match_eager(vocab: Vocabulary, pattern: str) -> None:
    eager = TokenIndex(compile_regex(pattern), vocab)
    lazy_dfa = compile_regex_auto(pattern, eager_nfa_limit=0)
    assert isinstance(lazy_dfa, LazyByteDFA)
    _assert_same_rows(eager, TokenIndex(lazy_dfa, vocab), vocab)


def _assert_same_rows(eager: TokenIndex, lazy: TokenIndex, vocab: Vocabulary) -> int:
    """Walk both indexes in lockstep over the allowed tokens; the pairs of states seen."""
    todo = [(eager.dfa.start, lazy.dfa.start)]
    seen = set(todo)
    while todo:
        es, ls = todo.pop()
        er, lr = eager.row(es), lazy.row(ls)
        assert er.ids(vocab.size).tolist() == lr.ids(vocab.size).tolist()
        np.testing.assert_array_equal(er.mask, lr.mask)
        assert eager.is_accepting(es) == lazy.is_accepting(ls)
        for tok in er.ids(vocab.size).tolist():
            if tok == EOS:
                continue
            pair = (er.next_state(tok), lr.next_state(tok))
            if pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return len(seen)


@pytest.mark.skipif(
    not (hasattr(mmap, "MADV_NOHUGEPAGE") and hasattr(mmap, "MAP_ANONYMOUS")),
    reason="mapped tables",
)
def test_prepare_vocabulary_primes_a_row_table_for_the_first_lazy_dfa(vocab: Vocabulary) -> None:
    from outlines_like.fsm.index import prepare_vocabulary

    empty_pool()
    prepare_vocabulary(vocab, stock_row_tables=False)  # (a compile worker's: none)
    assert _row_tables._free_tables == []
    prepare_vocabulary(vocab)
    assert [len(r) for r in _row_tables._free_tables] == [20_001 * 1024]
    lazy = compile_regex_auto(r"[ab]*a[ab]{11}", eager_nfa_limit=0)
    assert isinstance(lazy, LazyByteDFA)
    assert _row_tables._free_tables == []  # taken
    empty_pool()


def test_lazy_rows_on_a_reused_table_match_eager(vocab: Vocabulary) -> None:
    # the second DFA's table is the first one's mapping, its rows of thousands of states
    # (kept, past the first 1,024) still the first DFA's: the second index reads its own
    empty_pool()
    first = compile_regex_auto(r"[ab]*a[ab]{11}", eager_nfa_limit=0)
    assert isinstance(first, LazyByteDFA)
    address = first._table.ctypes.data
    index = TokenIndex(first, vocab)
    todo, seen = [first.start], {first.start}
    while todo:
        row = index.row(todo.pop())
        for tok in row.ids(vocab.size).tolist():
            if tok != EOS and (nxt := row.next_state(tok)) not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert first.n_states > 2_000
    del first, index, row
    gc.collect()
    pattern = r"[ab]*b[ab]{11}"
    eager = TokenIndex(compile_regex(pattern), vocab)
    lazy_dfa = compile_regex_auto(pattern, eager_nfa_limit=0)
    assert isinstance(lazy_dfa, LazyByteDFA)
    if hasattr(mmap, "MADV_NOHUGEPAGE") and hasattr(mmap, "MAP_ANONYMOUS"):
        assert lazy_dfa._table.ctypes.data == address
    assert _assert_same_rows(eager, TokenIndex(lazy_dfa, vocab), vocab) > 2_000


def test_table_layout(vocab: Vocabulary) -> None:
    table = TokenTable(vocab)
    assert table.n_text == len(TOKENS) - 3  # EOS, <pad> and b"" are never text
    assert EOS not in table.ids
    assert 17 not in table.ids
    assert 18 not in table.ids
    assert (np.diff(table.lengths) <= 0).all()
    for j in range(table.max_len):
        assert table.columns[j].shape[0] == table.active[j] == (table.lengths > j).sum()
    for b in range(256):
        for pos in table.by_first[b].tolist():
            assert vocab.tokens[table.ids[pos]][0] == b
    assert token_table(vocab) is token_table(vocab)


def test_rows_are_lazy_and_cached(vocab: Vocabulary) -> None:
    index = TokenIndex(compile_regex(r"[0-9]{3}"), vocab)
    assert index.computed_states == 0
    row = index.row(index.dfa.start)
    assert index.computed_states == 1
    assert index.row(index.dfa.start) is row
    assert row.ids(vocab.size).tolist() == [5, 6, 7]
    assert row.next_state(6) == index.dfa.step(index.dfa.start, b"12")
    assert row.next_state(0) == -1
    assert row.next_state(10**9) == -1


def test_eager_limit_and_lookahead(vocab: Vocabulary) -> None:
    dfa = compile_regex(r"[0-9]{3}")
    assert TokenIndex(dfa, vocab, eager_limit=100).computed_states == dfa.n_states
    ahead = TokenIndex(dfa, vocab, lookahead=1)
    ahead.row(dfa.start)
    assert ahead.computed_states > 1


def test_eos_bit_only_in_accepting_states(vocab: Vocabulary) -> None:
    index = TokenIndex(compile_regex(r"ab?"), vocab)
    start = index.row(index.dfa.start)
    assert not (start.mask[EOS // 32] >> (EOS % 32)) & 1
    after_a = index.row(start.next_state(0))
    assert (after_a.mask[EOS // 32] >> (EOS % 32)) & 1


@pytest.mark.parametrize(
    ("ids", "words"), [([], 1), ([0], 1), ([31], 1), ([32], 2), ([0, 5, 63, 64, 95], 3)]
)
def test_pack_ids_layout(ids: list[int], words: int) -> None:
    row = pack_ids(ids, words)
    assert row.dtype == np.int32
    assert row.shape == (words,)
    got = [i for i in range(words * 32) if (int(row[i // 32]) >> (i % 32)) & 1]
    assert got == ids


def test_one_lazy_dfa_shared_by_threads_and_vocabularies(vocab: Vocabulary) -> None:
    pattern = r"(ab|ba|1|-)*(abc)?x{0,3}"
    other = Vocabulary([*TOKENS, b"ab1", b"x"], [EOS], SPECIAL)
    reference = TokenIndex(compile_regex(pattern), vocab)
    shared = compile_regex_auto(pattern, eager_nfa_limit=0)
    indexes = [TokenIndex(shared, vocab), TokenIndex(shared, other)] * 2

    def work(index: TokenIndex) -> None:
        todo, seen = [shared.start], {shared.start}
        while todo:
            row = index.row(todo.pop())
            for tok in row.ids(index.vocab.size).tolist():
                if tok in index.vocab.eos_token_ids:
                    continue
                nxt = row.next_state(tok)
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)

    threads = [threading.Thread(target=work, args=(ix,)) for ix in indexes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # the lazy DFA's language is intact: same masks as the eager DFA along a walk
    ref_state, lazy_state = reference.dfa.start, shared.start
    for tok in [2, 3, 5, 8, 4, 0]:
        ref_row, lazy_row = reference.row(ref_state), indexes[0].row(lazy_state)
        np.testing.assert_array_equal(ref_row.mask, lazy_row.mask)
        ref_state, lazy_state = ref_row.next_state(tok), lazy_row.next_state(tok)
        if ref_state < 0:
            assert lazy_state < 0
            break


CHAIN_PATTERNS = [
    *PATTERNS,
    r'"[^"\\]{0,3}"',
    r'"[^"\\]*"',
    r"[a-c]{2,4}x?",
    r"(ab)+1?",
    r"[ab]*c[ab]{0,2}",
    r"[a-z0-9]{3}[a-z]*[0-9]?",
    r"(a|\xc3\xa9|b)*s?",
    r'"([^"\\]|\\.){0,4}"',
    r'[^"]{0,2}€?x',
    r"(é|[a-c1-3 ]){1,3}-",
    r"[^\x00-\x1f\\]{2,30}",
    r"[^a]{0,25}",
]


@pytest.mark.parametrize("pattern", CHAIN_PATTERNS)
@pytest.mark.parametrize(
    ("selective", "scalar_tail", "pairs"),
    [(0, 0, False), (0, 10**6, False), (10**6, 0, False), (0, 0, True), (0, 10**6, True)],
)
def test_every_walk_strategy_matches_the_scalar_walk(
    vocab: Vocabulary,
    monkeypatch: pytest.MonkeyPatch,
    pattern: str,
    selective: int,
    scalar_tail: int,
    pairs: bool,
) -> None:
    import outlines_like.fsm.index as index_mod

    # force the chain shortcut (any token count, any byte-set size), the full, per-first-byte
    # or per-first-two-bytes candidate selection, and the column-by-column or byte-by-byte
    # finish
    monkeypatch.setattr(index_mod, "_MIN_LOOP_TOKENS", 0)
    monkeypatch.setattr(index_mod, "_MIN_LOOP_BYTES", 1)
    monkeypatch.setattr(index_mod, "_SELECTIVE", selective)
    monkeypatch.setattr(index_mod, "_SCALAR_TAIL", scalar_tail)
    # pairs: always filter candidates on their first two bytes, else never
    monkeypatch.setattr(index_mod, "_PAIR_MIN", 0 if pairs else 10**9)
    monkeypatch.setattr(index_mod, "_PAIR_SHARE", 1.0)
    monkeypatch.setattr(index_mod, "_PAIR_SELECTIVE", 0)
    table = token_table(vocab)
    scratch = np.empty(vocab.size, dtype=np.int32)
    bits = np.zeros(vocab.size, dtype=bool)
    for dfa in (compile_regex(pattern), compile_regex_auto(pattern, eager_nfa_limit=0)):
        lazy = dfa if isinstance(dfa, LazyByteDFA) else None
        index = TokenIndex(dfa, vocab)
        todo, seen = [dfa.start], {dfa.start}
        while todo:
            state = todo.pop()
            ref_ids, ref_ends = scalar_walk(dfa, vocab, state)
            trans = dfa.transitions
            tok, ends = index_mod._walk_one(trans, trans.reshape(-1), table, state, lazy)
            ids, ends = index_mod._sort_by_token(tok, ends, scratch, bits)
            assert ids.tolist() == ref_ids, (pattern, state)
            assert ends.tolist() == ref_ends, (pattern, state)
            mask_ids = sorted([*ref_ids, EOS]) if dfa.is_accepting(state) else ref_ids
            assert index.row(state).ids(vocab.size).tolist() == mask_ids
            for end in ref_ends:
                if end not in seen:
                    seen.add(end)
                    todo.append(end)


@pytest.mark.parametrize(("fraction", "expect_some"), [(0.0, False), (0.3, True), (10.0, True)])
def test_precompute_cheapest_states(vocab: Vocabulary, fraction: float, expect_some: bool) -> None:
    dfa = compile_regex(r"[0-9]{2}-?[a-c ]+")
    pre = TokenIndex(dfa, vocab, precompute=fraction)
    assert (pre.computed_states > 0) == expect_some
    if fraction >= 10:
        assert pre.computed_states == dfa.n_states
    lazy = TokenIndex(dfa, vocab)
    for state in range(dfa.n_states):
        np.testing.assert_array_equal(pre.row(state).mask, lazy.row(state).mask)


@pytest.mark.parametrize(
    ("pattern", "prefix", "closed"),
    [
        (r'"[^"\\]*"', b'"', True),
        (r"[^\x00-\x1f]*", b"", True),
        (r"[a-z]*", b"", False),
        (r"[^é]*", b"", False),  # é leads nowhere
        (r'"[^"]{0,3}"', b'"', False),  # a counter, not a loop
    ],
)
def test_utf8_closed_states(pattern: str, prefix: bytes, closed: bool) -> None:
    import outlines_like.fsm.index as index_mod

    dfa = compile_regex(pattern)
    state = dfa.step(dfa.start, prefix)
    assert index_mod._utf8_closed(dfa.transitions, state, None) is closed


def test_prepare_vocabulary_imports_lark_for_the_first_grammar_compile() -> None:
    # (in a fresh interpreter: this one may have imported Lark already)
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from outlines_like.fsm import Vocabulary\n"
        "from outlines_like.fsm.index import prepare_vocabulary\n"
        "assert 'lark' not in sys.modules\n"
        "prepare_vocabulary(Vocabulary([b'<eos>', b'a', b'b'], [0]))\n"
        "assert 'lark.load_grammar' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
